"""Shared by the schedule and timer tests: a base time, a settable clock, a real store with a
delivery service over it (:class:`StoreEnv`) and a check of the service's thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from broker_core.message import StoredMessage
from broker_core.service_thread import ThreadedService
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import small_config

T0 = 1_700_000_000_000
S = 1_000


class Clock:
    """A settable clock shared by the store and the service."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class StoreEnv:
    """A real store in ``root/store`` and a delivery service over it, on one fake clock;
    restartable (``close`` then ``open``, as after a clean shutdown). A subclass makes its
    service in ``open_service`` and closes it in ``close_service``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = Clock(T0)
        self.store: MessageStore
        self.cursor: dict[tuple[str, int], int] = {}  # what new() has returned, per queue

    def open_service(self) -> None:
        raise NotImplementedError

    def close_service(self) -> None:
        raise NotImplementedError

    def open(self) -> None:
        self.store = MessageStore(small_config(self.root / "store"), clock_ms=self.clock)
        self.store.open()
        self.open_service()

    def close(self) -> None:
        self.close_service()
        self.store.close()

    def restart(self) -> None:
        self.close()
        self.open()

    def new(self, topic: str = "orders", queue_id: int = 0) -> list[StoredMessage]:
        """Messages delivered to a queue since the last call."""
        assert self.store.wait_dispatched()
        start = self.cursor.get((topic, queue_id), 0)
        got = self.store.get_messages(QueueRead(topic, queue_id, start, 10_000))
        self.cursor[(topic, queue_id)] = got.next_offset
        return got.messages


def ns(messages: list[StoredMessage]) -> list[int]:
    """The ``n`` property of each message (its number in the test)."""
    return [int(m.properties["n"]) for m in messages]


def assert_thread_delivers_when_due(
    env: StoreEnv, service: ThreadedService, put: Callable[[], object], due_ms: int
) -> None:
    """With ``service``'s thread running, what ``put()`` schedules reaches ``orders`` once
    the fake clock is set to ``due_ms`` and not before; then the thread is stopped, unfailed."""
    arrived = threading.Event()
    env.store.add_dispatch_listener(lambda topic, _q, _m: topic == "orders" and arrived.set())
    service.start()
    try:
        put()
        assert not arrived.wait(0.05)  # not due yet on the fake clock
        env.clock.now_ms = due_ms
        assert arrived.wait(5.0)
    finally:
        service.stop()
    assert service.failure is None
