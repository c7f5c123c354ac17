"""One way to run a background service: RocketMQ's ``ServiceThread``.

A ``ServiceThread`` runs rounds on a daemon thread. Each round calls :meth:`run_once`, then
waits for a wake-up (:meth:`wake`), for stop, or for the next round's delay, whichever
comes first. The contract every service gets:

* **A failed round is logged and retried.** ``last_error`` holds the round's exception until
  a later round succeeds; the thread lives on and waits ``error_backoff_ms`` (so a failing
  disk is not hammered).
* **A fatal error ends the thread and is recorded.** ``failure`` holds it; an exception is
  fatal when it is not an ``Exception`` (e.g. ``MemoryError`` is one, but ``SystemExit``
  and ``KeyboardInterrupt`` are too) or when the service's ``fatal(exc)`` says so.
  ``on_failure(exc)`` runs on the dying thread (e.g. to wake waiters).
* **An orderly end**: when ``quiet_exit(exc)`` says so (e.g. the store closed under the
  thread) the thread ends without a failure.
* **Stop is bounded**: :meth:`stop` joins for at most ``stop_timeout_ms`` and returns
  whether the thread ended; a thread stuck in a round is logged and left (it is a daemon).
* :meth:`state` is what health reports: ``"ok"``, ``"stopped"``, ``"failed: <error>"``
  (the thread is dead) or ``"error: <error>"`` (its last round failed, it retries).

Thread-safety: ``start``, ``stop`` and ``wake`` may be called from any thread; ``run_once``
runs only on the service thread (tests may call it directly while the thread is stopped).

Example::

    >>> ran = threading.Event()
    >>> t = ServiceThread("demo", ran.set, interval_ms=10_000, wait_first=False)
    >>> t.start()
    >>> ran.wait(5), t.state()
    (True, 'ok')
    >>> t.stop(timeout_ms=5_000), t.state()
    (True, 'stopped')
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def _never(_exc: Exception) -> bool:
    return False


_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (its first 15 bytes) in the OS too, where Linux
    lets a thread name itself: ``top -H``, ``ps -L`` and ``/proc/<pid>/task/<tid>/comm``
    then tell the service threads apart (a benchmark reads one's CPU there). Elsewhere,
    or when libc cannot be loaded, nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def describe(exc: BaseException) -> str:
    """``"TypeName: message"``, how health names an error."""
    return f"{type(exc).__name__}: {exc}"


class ServiceThread:
    """A background loop with start, bounded stop, wake-up and recorded failure.

    ``round_fn`` is the work of one round (the default :meth:`run_once` calls it).
    ``interval_ms`` is the wait between rounds, unless ``next_wait_ms()`` (called after a
    successful round) says otherwise. ``wait_first`` waits one interval before the first
    round (periodic housekeeping) instead of running it at once (queue drainers).
    """

    def __init__(
        self,
        name: str,
        round_fn: Callable[[], object] | None = None,
        *,
        interval_ms: float,
        wait_first: bool = True,
        next_wait_ms: Callable[[], float] | None = None,
        error_backoff_ms: float | None = None,
        fatal: Callable[[Exception], bool] = _never,
        quiet_exit: Callable[[Exception], bool] = _never,
        on_failure: Callable[[BaseException], None] | None = None,
        stop_timeout_ms: float = 10_000,
    ) -> None:
        self.name = name
        self._round_fn = round_fn
        self.interval_ms = interval_ms
        self._wait_first = wait_first
        self._next_wait_ms = next_wait_ms
        self._error_backoff_ms = error_backoff_ms  # None: the interval
        self._fatal = fatal
        self._quiet_exit = quiet_exit
        self._on_failure = on_failure
        self.stop_timeout_ms = stop_timeout_ms
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None  # what ended the thread
        self.last_error: Exception | None = None  # the last round's error, until one succeeds
        self.rounds = 0  # rounds completed without error (a metric)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the daemon thread; a no-op while it runs."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            # A fresh stop flag per run: a thread left running by a timed-out stop keeps
            # its own (set) flag and ends after its round, beside the new one.
            self._stopping = threading.Event()
            self._wake.clear()
            self.failure = None
            self.last_error = None
            self._thread = threading.Thread(
                target=self._loop, args=(self._stopping,), name=self.name, daemon=True
            )
            self._thread.start()

    def stop(self, timeout_ms: float | None = None) -> bool:
        """Ask the thread to end and join it for at most ``timeout_ms``; True if it ended."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stopping.set()
        self._wake.set()
        if thread is None or thread is threading.current_thread():
            return True
        bound_ms = self.stop_timeout_ms if timeout_ms is None else timeout_ms
        thread.join(bound_ms / 1000)
        if thread.is_alive():
            log.error("%s did not stop within %d ms; left running", self.name, bound_ms)
            return False
        return True

    def request_stop(self) -> None:
        """Ask the thread to end without waiting for it (``stop`` joins it later)."""
        with self._lock:
            self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """End the current wait early: the next round runs now."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """True once stop was asked (a long round may check it to end early)."""
        return self._stopping.is_set()

    def is_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def state(self) -> str:
        """``"ok"``, ``"stopped"``, ``"failed: <error>"`` or ``"error: <error>"``."""
        if self.failure is not None:
            return f"failed: {describe(self.failure)}"
        if self.last_error is not None:
            return f"error: {describe(self.last_error)}"
        return "ok" if self.is_alive() else "stopped"

    # ---- the loop -----------------------------------------------------------------------

    def run_once(self) -> object:
        """One round of work; the default calls ``round_fn``."""
        if self._round_fn is None:
            raise NotImplementedError(f"{self.name}: give a round_fn or override run_once")
        return self._round_fn()

    def _wait(self, wait_ms: float, stopping: threading.Event) -> bool:
        """Wait for wake, stop or ``wait_ms``; False once stop was asked."""
        if not stopping.is_set():
            self._wake.wait(max(0.0, wait_ms) / 1000)
            self._wake.clear()
        return not stopping.is_set()

    def _loop(self, stopping: threading.Event) -> None:
        name_os_thread(self.name)
        wait_ms = self.interval_ms if self._wait_first else 0.0
        try:
            while self._wait(wait_ms, stopping):
                wait_ms = self._round(stopping)
        except BaseException as exc:  # recorded: a dead thread must be visible in health
            log.exception("%s thread died", self.name)
            self.failure = exc
            if self._on_failure is not None:
                self._on_failure(exc)

    def _round(self, stopping: threading.Event) -> float:
        """Run one round; returns how long to wait before the next."""
        try:
            self.run_once()
        except Exception as exc:
            if self._quiet_exit(exc):
                log.info("%s ends: %s", self.name, exc)
                stopping.set()
                return 0.0
            if self._fatal(exc):
                raise
            if getattr(exc, "retriable", False):  # expected now and then: no traceback
                log.warning("%s round failed; retrying: %s", self.name, exc)
            else:
                log.exception("%s round failed; retrying", self.name)
            self.last_error = exc
            return self.interval_ms if self._error_backoff_ms is None else self._error_backoff_ms
        self.last_error = None
        self.rounds += 1
        return self._next_wait_ms() if self._next_wait_ms is not None else self.interval_ms


class ThreadedService:
    """A service whose background work is one :class:`ServiceThread`, ``self.thread``
    (set by the subclass's ``__init__``): ``start``, ``stop`` and ``failure`` delegate to
    it. A subclass that must do more on start or stop overrides them and calls these."""

    thread: ServiceThread

    @property
    def failure(self) -> BaseException | None:
        """What ended the service's thread, or None."""
        return self.thread.failure

    def start(self) -> None:
        """Start the service's daemon thread (a no-op while it runs)."""
        self.thread.start()

    def stop(self) -> None:
        """Stop the service's thread and wait (bounded) for its current round to end."""
        self.thread.stop()
