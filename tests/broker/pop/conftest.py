"""POP harness: a store, offsets and a POP service on tmp_path with a settable clock,
that can be restarted or crashed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.model import PopConfig, PoppedMessage
from broker_core.broker.pop.pop import PopService
from broker_core.broker.retry import RetryPolicy
from broker_core.message import PROPERTY_MESSAGE_GROUP, Message, StoredMessage
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message, small_config

T0 = 1_700_000_000_000
S = 1_000
INVISIBLE_MS = 30 * S


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Broker:
    """A store, offsets and a POP service on tmp_path that can be restarted or crashed."""

    def __init__(self, root: Path, config: PopConfig | None = None) -> None:
        self.root = root
        self.clock = Clock()
        self.fifo_groups: set[str] = set()
        self.policies: dict[str, RetryPolicy] = {}
        self.config = config or PopConfig()
        self.store: MessageStore | None = None
        self.open()

    @property
    def offsets_path(self) -> Path:
        return self.root / "config" / "consumerOffset.json"

    def open(self) -> None:
        self.store = MessageStore(small_config(self.root / "store"))
        self.store.open()
        self.offsets = ConsumerOffsetManager(self.offsets_path)
        self.pop = PopService(
            self.store,
            self.offsets,
            self.config,
            clock_ms=self.clock,
            retry_policy_for=lambda g: self.policies.get(g, RetryPolicy()),
            is_fifo=lambda g: g in self.fifo_groups,
        )
        self.pop.open()
        self.store.wait_dispatched()

    def close(self) -> None:
        if self.store is not None:
            self.pop.close()
            self.store.close()
            self.store = None

    def restart(self) -> None:
        self.close()
        self.open()

    def crash_restart(self) -> None:
        """Stop without persisting consumer offsets: only what was persisted earlier survives."""
        assert self.store is not None
        self.pop.stop()
        self.store.close()  # the revive log is in the store; offsets were never written
        self.store = None
        self.open()

    def produce(self, messages: list[Message]) -> None:
        assert self.store is not None
        self.store.put_messages(messages)
        assert self.store.wait_dispatched()

    def receive(
        self,
        group: str = "g",
        topic: str = "orders",
        qids: tuple[int, ...] = (0,),
        max_count: int = 32,
        invisible_ms: int = INVISIBLE_MS,
        flt: MessageFilter | None = None,
    ) -> list[PoppedMessage]:
        return self.pop.receive(
            group, topic, list(qids), max_count=max_count, invisible_ms=invisible_ms, filter=flt
        )

    def revive_at(self, ms_after_t0: int) -> int:
        assert self.store is not None
        self.clock.now = T0 + ms_after_t0
        count = self.pop.run_revive()
        assert self.store.wait_dispatched()
        return count

    def topic_messages(self, topic: str) -> list[StoredMessage]:
        assert self.store is not None
        assert self.store.wait_dispatched()
        return self.store.get_messages(
            QueueRead(topic, 0, self.store.min_offset(topic, 0), 1000)
        ).messages


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def ns(popped: list[PoppedMessage]) -> list[int]:
    return [int(p.message.properties["n"]) for p in popped]


def grouped(i: int, group: str, queue_id: int = 0) -> Message:
    msg = make_message(i, queue_id=queue_id)
    msg.properties[PROPERTY_MESSAGE_GROUP] = group
    return msg
