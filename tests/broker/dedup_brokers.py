"""Brokers over one temporary store, one at a time, for the dedup tests (test_dedup*.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import small_config

Make = Callable[..., Broker]


@contextmanager
def brokers(tmp_path: Path, clock: Callable[[], int] | None = None) -> Iterator[Make]:
    """``start(**broker_config)``: a started broker over ``tmp_path``'s store (the one
    before it stopped first, so its window is rebuilt from the log); all stopped at the
    end."""
    started: list[Broker] = []

    def start(**config: int) -> Broker:
        for old in started:
            if old.store.is_open:
                old.stop()
        settings = BrokerConfig(default_queue_nums=2, **config)
        extra = {} if clock is None else {"clock_ms": clock}
        b = Broker(settings, small_config(tmp_path), **extra)
        b.start()
        started.append(b)
        return b

    try:
        yield start
    finally:
        for b in started:
            if b.store.is_open:
                b.stop()


def stored(b: Broker, topic: str) -> list[str]:
    """The ids stored in ``topic``, every queue, sorted."""
    b.store.wait_dispatched()
    ids = []
    for queue_id in range(b.topics.for_read(topic).read_queue_nums):
        got = b.store.get_messages(QueueRead(topic, queue_id, 0, 10_000))
        ids += [m.message_id for m in got.messages]
    return sorted(ids)
