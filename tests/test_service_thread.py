"""ServiceThread: rounds, wake-up, retried round errors, recorded failure, bounded stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker_core.errors import BusyError, StoreClosedError
from broker_core.service_thread import ServiceThread, ThreadedService

DEADLINE_S = 5.0


class Fatal(BaseException):
    """Not an ``Exception``: ends the thread."""


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_wake_runs_a_round_before_the_interval() -> None:
    ran = threading.Event()
    t = ServiceThread("t", ran.set, interval_ms=60_000)
    t.start()
    try:
        t.wake()
        assert ran.wait(DEADLINE_S)
        assert t.state() == "ok"
    finally:
        assert t.stop(timeout_ms=5_000)
    assert t.state() == "stopped"


def test_a_failed_round_is_recorded_retried_and_cleared() -> None:
    calls: list[int] = []

    def round_fn() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("injected")

    t = ServiceThread("t", round_fn, interval_ms=5, wait_first=False)
    t.start()
    try:
        wait_until(lambda: t.rounds >= 1, "a successful round")
        assert len(calls) >= 3 and t.failure is None and t.last_error is None
        assert t.state() == "ok"
    finally:
        t.stop()


def test_the_last_error_shows_while_rounds_fail() -> None:
    t = ServiceThread("t", lambda: _raise(BusyError("behind")), interval_ms=5)
    t.start()
    try:
        wait_until(lambda: t.last_error is not None, "the error")
        assert t.state() == "error: BusyError: behind"
        assert t.is_alive()
    finally:
        t.stop()


def test_a_fatal_error_ends_the_thread_and_is_recorded() -> None:
    seen: list[BaseException] = []
    t = ServiceThread("t", lambda: _raise(Fatal("dead")), interval_ms=5, on_failure=seen.append)
    t.start()
    wait_until(lambda: not t.is_alive(), "the thread to die")
    assert isinstance(t.failure, Fatal) and seen == [t.failure]
    assert t.state() == "failed: Fatal: dead"
    assert t.stop(timeout_ms=1_000)


def test_fatal_predicate_ends_the_thread_on_an_exception() -> None:
    t = ServiceThread(
        "t",
        lambda: _raise(ValueError("bug")),
        interval_ms=5,
        fatal=lambda exc: isinstance(exc, ValueError),
    )
    t.start()
    wait_until(lambda: t.failure is not None, "the failure")
    assert t.state() == "failed: ValueError: bug"


def test_quiet_exit_ends_without_a_failure() -> None:
    t = ServiceThread(
        "t",
        lambda: _raise(StoreClosedError("closed")),
        interval_ms=5,
        quiet_exit=lambda exc: isinstance(exc, StoreClosedError),
    )
    t.start()
    wait_until(lambda: not t.is_alive(), "the thread to end")
    assert t.failure is None and t.state() == "stopped"


def test_stop_is_bounded_when_a_round_hangs() -> None:
    release = threading.Event()
    entered = threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    t = ServiceThread("t", stuck, interval_ms=5, wait_first=False)
    t.start()
    assert entered.wait(DEADLINE_S)
    started = time.monotonic()
    assert t.stop(timeout_ms=100) is False
    assert time.monotonic() - started < 2.0
    release.set()
    wait_until(lambda: not t.is_alive(), "the stuck round to end")


def test_restart_after_stop() -> None:
    ran = threading.Event()
    t = ServiceThread("t", ran.set, interval_ms=5)
    t.start()
    t.stop()
    t.start()
    try:
        assert ran.wait(DEADLINE_S) and t.is_alive()
    finally:
        t.stop()


def test_a_restart_after_a_timed_out_stop_runs_one_new_thread() -> None:
    release, entered = threading.Event(), threading.Event()
    rounds: list[str] = []

    def round_fn() -> None:
        rounds.append(threading.current_thread().name)
        if not release.is_set():
            entered.set()
            release.wait(DEADLINE_S)

    t = ServiceThread("t", round_fn, interval_ms=5, wait_first=False)
    t.start()
    assert entered.wait(DEADLINE_S)
    assert t.stop(timeout_ms=50) is False  # the old thread is stuck in its round
    release.set()
    t.start()
    try:
        before = len(rounds)
        wait_until(lambda: len(rounds) >= before + 3, "rounds of the new thread")
        old_ends = [th for th in threading.enumerate() if th.name == "t"]
        wait_until(lambda: sum(th.is_alive() for th in old_ends) <= 1, "the old thread to end")
        assert t.is_alive() and t.state() == "ok"
    finally:
        assert t.stop(timeout_ms=5_000)


def _raise(exc: BaseException) -> None:
    raise exc


class _Service(ThreadedService):
    def __init__(self, round_fn: Callable[[], object]) -> None:
        self.thread = ServiceThread("svc", round_fn, interval_ms=60_000, wait_first=False)


def test_a_threaded_service_runs_stops_and_reports_its_thread() -> None:
    ran = threading.Event()
    service = _Service(ran.set)
    service.start()
    try:
        assert ran.wait(DEADLINE_S)
        assert service.thread.is_alive() and service.failure is None
    finally:
        service.stop()
    assert not service.thread.is_alive()

    def die() -> None:
        raise Fatal("gone")

    dying = _Service(die)
    dying.start()
    wait_until(lambda: dying.failure is not None, "the failure")
    assert isinstance(dying.failure, Fatal)
    dying.stop()


def test_the_thread_carries_its_name_in_the_os() -> None:
    """``top -H`` and ``/proc/<pid>/task/<tid>/comm`` tell the service threads apart (a
    benchmark reads the trace thread's CPU there); names are cut to Linux's 15 bytes."""
    seen: list[str] = []

    def own_comm() -> None:
        seen.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text())

    t = ServiceThread("a-long-service-name", own_comm, interval_ms=60_000, wait_first=False)
    t.start()
    try:
        wait_until(lambda: bool(seen), "a round")
    finally:
        assert t.stop(timeout_ms=5_000)
    assert seen[0].strip() == "a-long-service-"
