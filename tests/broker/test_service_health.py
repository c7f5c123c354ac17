"""Every background thread of a running Broker shows a failed round, a dead thread and a
bounded stop in ``Broker.service_health()`` the same way (issue 19, item 1).

The failure is injected by replacing ``run_once`` of that service's ``ServiceThread``
instance, so the real broker runs around it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.pull import PullRequest
from broker_core.config import BrokerConfig
from broker_core.message import Message
from broker_core.service_thread import ServiceThread
from tests.store.conftest import small_config

DEADLINE_S = 5.0
SERVICES = [
    "dispatch",
    "commitlog-flush",
    "derived-flush",
    "cleanup",
    "long-polling",
    "schedule-delivery",
    "timer-wheel",
    "transaction-check",
    "pop-revive",
    "client-expiry",
    "broker-housekeeping",
]


class Fatal(BaseException):
    """Ends a ServiceThread (it is not an ``Exception``)."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(default_queue_nums=1), small_config(tmp_path / "store"))
    b.start()
    yield b
    b.stop()


def thread_of(broker: Broker, name: str) -> ServiceThread:
    (thread,) = [t for t in broker.service_threads() if t.name == name]
    return thread


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def inject(thread: ServiceThread, monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def failing() -> None:
        raise exc

    monkeypatch.setattr(thread, "run_once", failing)
    monkeypatch.setattr(thread, "interval_ms", 10)
    thread.wake()


def test_every_thread_is_listed_and_ok(broker: Broker) -> None:
    health = broker.service_health()
    assert sorted(health) == sorted(SERVICES)
    assert set(health.values()) == {"ok"}


@pytest.mark.parametrize("name", SERVICES)
def test_a_failed_round_shows_in_health(
    broker: Broker, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = thread_of(broker, name)
    inject(thread, monkeypatch, RuntimeError("injected"))
    wait_until(lambda: broker.service_health()[name] != "ok", f"{name} to report the error")
    if name == "dispatch":  # a dispatch bug ends the thread: the store then refuses writes
        assert broker.service_health()[name] == "failed: RuntimeError: injected"
        return
    assert broker.service_health()[name] == "error: RuntimeError: injected"
    assert thread.is_alive(), "a failed round must not end the thread"
    monkeypatch.undo()  # the real round again: the next success clears the error
    thread.wake()
    wait_until(lambda: broker.service_health()[name] == "ok", f"{name} to recover")


@pytest.mark.parametrize("name", SERVICES)
def test_a_dead_thread_shows_in_health(
    broker: Broker, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = thread_of(broker, name)
    inject(thread, monkeypatch, Fatal("injected"))
    wait_until(lambda: not thread.is_alive(), f"{name} to die")
    assert broker.service_health()[name] == "failed: Fatal: injected"
    others = {k: v for k, v in broker.service_health().items() if k != name}
    if name != "dispatch":  # the others go on (dispatch's death fails the flush of writes)
        assert set(others.values()) == {"ok"}, others


@pytest.mark.parametrize("name", SERVICES)
def test_stop_is_bounded(broker: Broker, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    thread = thread_of(broker, name)
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    monkeypatch.setattr(thread, "run_once", stuck)
    thread.wake()
    try:
        assert entered.wait(DEADLINE_S)
        started = time.monotonic()
        assert thread.stop(timeout_ms=100) is False
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
    wait_until(lambda: not thread.is_alive(), f"{name} to end after its round")
    assert broker.service_health()[name] == "stopped"


def test_the_broker_works_while_a_service_is_dead(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = thread_of(broker, "timer-wheel")
    inject(thread, monkeypatch, Fatal("injected"))
    wait_until(lambda: not thread.is_alive(), "the timer thread to die")
    broker.sending.send([Message("t", b"still served")], producer_group="pg")
    broker.store.wait_dispatched()
    assert [m.body for m in broker.pulling.pull("g", PullRequest("t", 0, 0, 10)).messages] == [
        b"still served"
    ]
