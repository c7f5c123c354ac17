"""The NameServer's expiry scan runs on a ServiceThread: a failed scan is named in
``scan_failure`` and retried, and stop is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from broker_core.namesrv.server import NameServer

DEADLINE_S = 5.0


@pytest.fixture
def server() -> Iterator[NameServer]:
    ns = NameServer("127.0.0.1:0", scan_interval_ms=10)
    ns.start()
    yield ns
    ns.stop()


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_failed_scan_is_named_and_retried(
    server: NameServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing() -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(server.scanner, "run_once", failing)
    wait_until(lambda: server.scan_failure != "", "the scan to fail")
    assert server.scan_failure == "RuntimeError: injected"
    assert server.scanner.state() == "error: RuntimeError: injected"
    monkeypatch.undo()
    wait_until(lambda: server.scan_failure == "", "a good scan to clear it")
    assert server.scanner.state() == "ok"


def test_stop_of_the_scan_is_bounded(server: NameServer, monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(DEADLINE_S)

    monkeypatch.setattr(server.scanner, "run_once", stuck)
    try:
        assert entered.wait(DEADLINE_S)
        started = time.monotonic()
        assert server.scanner.stop(timeout_ms=100) is False
        assert time.monotonic() - started < 2.0
    finally:
        release.set()
    wait_until(lambda: not server.scanner.is_alive(), "the scan to end")
