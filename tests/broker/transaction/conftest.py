"""Transaction harness: a store, offsets and a TransactionService on tmp_path with a settable
clock and a recording checker, that can be restarted; message builders for half records."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.system_topics import TRANS_HALF_TOPIC
from broker_core.broker.transaction.check import PROPERTY_CHECK_BASE_MS, LiveHalf
from broker_core.broker.transaction.transaction import (
    CheckRequest,
    CheckRound,
    PrepareResult,
    Resolution,
    TransactionService,
)
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message, small_config

T0 = 1_700_000_000_000
TIMEOUT_MS = 6_000
GROUP = "pg-orders"
REAL = "orders"
TRANSACTION_PROPS = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_BASE_MS,
)


def read_queue(store: MessageStore, topic: str, queue_id: int = 0) -> list[StoredMessage]:
    assert store.wait_dispatched()
    out: list[StoredMessage] = []
    offset = store.min_offset(topic, queue_id)
    while offset < store.max_offset(topic, queue_id):
        got = store.get_messages(QueueRead(topic, queue_id, offset, 512))
        out.extend(got.messages)
        offset = got.next_offset
    return out


class Broker:
    """A real store, offset manager and transaction service over one directory."""

    def __init__(self, root: Path, **service_options: Any) -> None:
        self.root = root
        self.options = service_options
        self.now_ms = T0
        self.requests: list[CheckRequest] = []
        self.answer: Callable[[CheckRequest], None] | None = None
        self.open()

    def _checker(self, request: CheckRequest) -> None:
        self.requests.append(request)
        if self.answer is not None:
            self.answer(request)

    def open(self) -> None:
        self.store = MessageStore(small_config(self.root / "store"))
        self.store.open()
        self.offsets = ConsumerOffsetManager(self.root / "config" / "consumerOffset.json")
        self.tx = TransactionService(
            self.store, self.offsets, self._checker, clock_ms=lambda: self.now_ms, **self.options
        )
        self.tx.open()

    def close(self) -> None:
        self.tx.stop()
        self.store.close()

    def restart(self) -> None:
        self.close()
        self.open()

    def prepare(self, i: int, **kw: Any) -> PrepareResult:
        return self.tx.prepare(make_message(i, topic=REAL, **kw), GROUP, f"tx-{i}")

    def end(self, p: PrepareResult, resolution: Resolution, *, from_check: bool = False) -> None:
        self.tx.end(p.message_id, p.transaction_id, resolution, from_check=from_check)

    def checks(self, now_ms: int) -> CheckRound:
        self.now_ms = now_ms
        return self.tx.run_checks(now_ms)

    def real(self) -> list[StoredMessage]:
        return read_queue(self.store, REAL)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def stored(
    props: dict[str, str],
    *,
    topic: str = TRANS_HALF_TOPIC,
    queue_offset: int = 3,
    physical_offset: int = 4096,
    sys_flag: int = 0,
) -> StoredMessage:
    return StoredMessage(
        topic,
        0,
        queue_offset,
        physical_offset,
        b"body",
        props,
        7,
        sys_flag,
        T0 - 5,
        ("10.0.0.1", 5555),
        T0,
        ("127.0.0.1", 8081),
        2,
        0,
        0,
        100,
    )


def half_props(**extra: str) -> dict[str, str]:
    props = {
        PROPERTY_UNIQ_KEY: "ID1",
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_PRODUCER_GROUP: GROUP,
        PROPERTY_CHECK_BASE_MS: str(T0),
    }
    props.update(extra)
    return props


def live(offset: int, message_id: str = "", check_times: int = 0, due_ms: int = T0) -> LiveHalf:
    return LiveHalf(
        offset, offset * 100, message_id or f"ID{offset}", "tx", GROUP, check_times, due_ms
    )
