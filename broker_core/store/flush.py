"""Flushing: commitlog durability (async or sync group commit) and the checkpoint.

* Async (default): a thread fdatasyncs the commitlog every ``flush_interval_ms``; an
  append returns as soon as its bytes are in the page cache.
* Sync: an append returns only once an fdatasync covers it. Appenders register the
  offset they need and wait; the flush thread syncs up to the current write position
  and wakes every appender it covered, so concurrent appends share one fdatasync
  (group commit).

The derived-data flusher periodically flushes consume queues and the index, then writes
the checkpoint: the durable commitlog offset (where recovery starts scanning), the
dispatched offset and each queue's min and max offsets at that moment (what recovery compares
rebuilt queues against).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.errors import FlushTimeoutError, StoreError
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.commitlog import CommitLog

log = logging.getLogger(__name__)


class CommitLogFlusher:
    """The commitlog's flush thread, in async or sync (group commit) mode."""

    def __init__(self, commitlog: CommitLog, *, sync: bool, interval_ms: int) -> None:
        self._commitlog = commitlog
        self.sync = sync
        self._interval_s = interval_ms / 1000
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the flush thread waits here for work
        self._flushed = threading.Condition(lock)  # appenders wait here for durability
        self._wanted = 0  # highest offset an appender waits for
        self._running = False
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.flush_count = 0
        self.last_flush_ms = 0.0  # how long the last flush took (a metric)

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="commitlog-flush", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            with self._cond:
                if self.sync:
                    while self._running and self._wanted <= self._commitlog.flushed_offset:
                        self._cond.wait(self._interval_s)
                else:
                    self._cond.wait(self._interval_s)
            self._flush_once()

    def _flush_once(self) -> None:
        try:
            started = time.perf_counter()
            flushed = self._commitlog.flush()
            self.last_flush_ms = (time.perf_counter() - started) * 1000
            self.flush_count += 1
        except Exception as exc:  # disk error: appenders must hear about it
            log.exception("commitlog flush failed")
            self.failure = exc
            flushed = -1
        with self._flushed:
            self._flushed.notify_all()
        if flushed < 0:
            time.sleep(self._interval_s)

    def wait_durable(self, offset: int, timeout_ms: int) -> None:
        """Block until the commitlog is durable up to ``offset`` (sync mode).

        Appenders that arrive while a flush runs are covered by the next one, so a
        burst of concurrent appends shares one fdatasync (group commit).
        """
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            if offset > self._wanted:
                self._wanted = offset
                self._cond.notify()
            while self._commitlog.flushed_offset < offset:
                if self.failure is not None:
                    raise StoreError(f"commitlog flush failed: {self.failure}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FlushTimeoutError(
                        f"sync flush did not reach offset {offset} within {timeout_ms} ms"
                    )
                self._flushed.wait(remaining)

    def stop(self) -> None:
        self._running = False
        with self._cond:
            self._cond.notify_all()
            self._flushed.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._commitlog.flush()


@dataclass(slots=True)
class Checkpoint:
    """What recovery needs to know about the last flush of each kind."""

    physical_flushed: int = 0
    dispatched: int = 0
    # {topic: {queue id: [min offset, max offset]}} as of ``dispatched``
    queue_offsets: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    written_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "physical_flushed": self.physical_flushed,
            "dispatched": self.dispatched,
            "queue_offsets": self.queue_offsets,
            "written_ms": self.written_ms,
        }

    @classmethod
    def load(cls, path: Path) -> tuple[Checkpoint | None, str]:
        """The checkpoint, or None (with why) when neither it nor its backup is usable."""
        loaded = read_json_atomic(path)
        if loaded.data is None:
            return None, loaded.problem
        try:
            d = loaded.data
            cp = cls(int(d["physical_flushed"]), int(d["dispatched"]),
                     {t: {q: [int(o[0]), int(o[1])] for q, o in qs.items()}
                      for t, qs in d["queue_offsets"].items()},
                     int(d["written_ms"]))  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return None, f"checkpoint has bad fields: {exc}"
        return cp, loaded.problem

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())


class DerivedFlusher:
    """Periodically flushes consume queues and index, then writes the checkpoint."""

    def __init__(self, interval_ms: int, flush_and_checkpoint: Callable[[], None]) -> None:
        self._interval_s = interval_ms / 1000
        self._work = flush_and_checkpoint
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="derived-flush", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._work()
            except Exception:
                log.exception("consume queue / index flush failed; will retry")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
