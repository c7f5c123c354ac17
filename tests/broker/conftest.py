"""Shared helpers and fixtures of the long-polling tests (test_long_polling*.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.broker.long_polling import LongPollingService
from broker_core.broker.pull import PullResult
from broker_core.message import Message
from broker_core.store.message_store import MessageStore
from tests.store.conftest import small_config

LONG_TIMEOUT_MS = 10_000  # a parked pull answered well before this was woken by dispatch


class DispatchWatcher:
    """A dispatch listener registered after the service's: once it has seen a queue
    grow, the service's listener has seen it too (listeners run in order)."""

    def __init__(self, store: MessageStore) -> None:
        self._cond = threading.Condition()
        self._max: dict[tuple[str, int], int] = {}
        store.add_dispatch_listener(self._on_dispatch)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        with self._cond:
            self._max[(topic, queue_id)] = max_offset
            self._cond.notify_all()

    def wait_for(self, topic: str, queue_id: int, max_offset: int) -> None:
        with self._cond:
            assert self._cond.wait_for(
                lambda: self._max.get((topic, queue_id), 0) >= max_offset, timeout=10
            )


class Answers:
    """Collects callback results; ``wait(n)`` blocks until n answers arrived."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.results: list[tuple[str, PullResult]] = []

    def callback(self, name: str = "") -> Callable[[PullResult], None]:
        def deliver(result: PullResult) -> None:
            with self._cond:
                self.results.append((name, result))
                self._cond.notify_all()

        return deliver

    def wait(self, count: int, timeout_s: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.results) >= count, timeout=timeout_s)

    @property
    def only(self) -> PullResult:
        assert len(self.results) == 1
        return self.results[0][1]


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(small_config(tmp_path / "store"))
    store.open()
    yield store
    store.close()


@pytest.fixture
def polling(store: MessageStore) -> Iterator[LongPollingService]:
    """A started service on the real clock."""
    service = LongPollingService(store)
    service.start()
    yield service
    service.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manual(store: MessageStore, clock: FakeClock) -> Iterator[LongPollingService]:
    """A service without its hold thread: the test calls run_once(now_ms)."""
    service = LongPollingService(store, clock_ms=clock)
    yield service
    service.stop()


def msg(tag: str, topic: str = "t", queue_id: int = 0, body: bytes = b"x") -> Message:
    return Message(topic, body, queue_id=queue_id, properties={"TAGS": tag})
