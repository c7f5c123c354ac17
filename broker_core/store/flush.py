"""Flushing: commitlog durability (async or sync group commit) and the checkpoint.

* Async (default): a thread fdatasyncs the commitlog every ``flush_interval_ms``; an
  append returns as soon as its bytes are in the page cache.
* Sync: an append returns only once an fdatasync covers it. Appenders register the
  offset they need and wait; the flush thread takes every registration at once, syncs
  up to the current write position and wakes exactly the appenders it covered, so
  concurrent appends share one fdatasync (group commit, see ``CommitLogFlusher``).

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
from broker_core.service_thread import ServiceThread
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.commitlog import CommitLog

log = logging.getLogger(__name__)

GATHER_GAP_S = 0.0003  # a group commit waits for more appenders while they come this often
GATHER_MAX_S = 0.002  # ... but never longer than this


class CommitLogFlusher:
    """The commitlog's flush thread, in async or sync (group commit) mode.

    Sync mode is RocketMQ's GroupCommitService: an appender registers (offset, its own
    wake-up lock) in the pending list and blocks on that lock. The flush thread swaps the
    pending list for an empty one, fdatasyncs once — covering every registered appender,
    since each registered only after its append — and releases exactly the appenders it
    covered. Appenders that register while a flush runs wait in the new list and are all
    covered by the next single fdatasync. Each appender waits on a lock of its own, so a
    flush wakes only the threads it made durable and they do not queue on a shared lock.
    """

    def __init__(self, commitlog: CommitLog, *, sync: bool, interval_ms: int) -> None:
        self._commitlog = commitlog
        self.sync = sync
        self._mutex = threading.Lock()  # guards _pending
        self._pending: list[tuple[int, threading.Lock]] = []  # (offset wanted, its waiter's lock)
        self._work = threading.Event()  # set when _pending gained an entry
        self._running = False
        self.failure: BaseException | None = None  # a flush failed: sticky, appenders are refused
        self.flush_count = 0
        self.last_flush_ms = 0.0  # how long the last flush took (a metric)
        self._last_group = 0  # appenders the next group commit expects (see _group_commit)
        self._group_before = 0  # appenders waiting when the last group commit released
        # Sync mode: a round blocks on ``_work`` (an appender registered) for up to the
        # interval and runs the next round at once, so appenders already covered by a
        # group commit never trigger an extra, smaller one. A failed flush fails its round
        # (and every later one: ``failure`` is sticky), which health reports; the thread
        # goes on flushing.
        self.thread = ServiceThread(
            "commitlog-flush",
            self._round,
            interval_ms=interval_ms,
            wait_first=not sync,
            next_wait_ms=(lambda: 0.0) if sync else None,
        )

    def start(self) -> None:
        self._running = True
        self.thread.start()

    def _round(self) -> None:
        if self.sync:
            if self._work.wait(self.thread.interval_ms / 1000) and self._running:
                self._group_commit()
        else:
            self._work.clear()
            self._flush_once()
        if self.failure is not None:
            raise StoreError(f"commitlog flush failed: {self.failure}")

    def _gather(self) -> None:
        """Let appenders that are still arriving join this group commit.

        Returns once as many appenders wait as were waiting when either of the last two
        group commits ended (all back: nothing more is expected), or when none registered for
        ``GATHER_GAP_S``, or ``GATHER_MAX_S`` after it started. When fdatasync is fast next
        to the appenders' own work, the appenders the last flush released are still
        appending when the next flush could start; without this wait every fdatasync would
        cover only a handful of them. A lone appender (or a few, all back at once) does not
        wait at all.
        """
        deadline = time.monotonic() + GATHER_MAX_S
        while self._running and len(self._pending) < self._last_group:
            self._work.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._work.wait(min(GATHER_GAP_S, remaining)):
                return

    def _group_commit(self) -> None:
        """Swap the pending list, one fdatasync for all of it, release whom it covered."""
        self._gather()
        with self._mutex:
            self._work.clear()
            batch, self._pending = self._pending, []
        if not batch:
            return
        flushed = self._flush_once()
        with self._mutex:  # arrivals during the flush that it covered go too (all if it failed)
            later = self._pending
            covered = [w for w in later if w[0] <= flushed or flushed < 0]
            if covered:
                self._pending = [w for w in later if w[0] > flushed and flushed >= 0]
            # The next group commit expects back everyone waiting now and, as many
            # appenders alternate between two groups (one appends while the other's
            # fdatasync runs), as many as the commit before released.
            group = len(batch) + len(later)
            self._last_group, self._group_before = max(group, self._group_before), group
        for _offset, waiter in batch:
            waiter.release()  # a failed flush releases everyone: they read ``failure``
        for _offset, waiter in covered:
            waiter.release()

    def _flush_once(self) -> int:
        """fdatasync what was appended; returns the durable offset, -1 on failure."""
        try:
            started = time.perf_counter()
            flushed = self._commitlog.flush()
            self.last_flush_ms = (time.perf_counter() - started) * 1000
            self.flush_count += 1
            return flushed
        except Exception as exc:  # disk error: appenders must hear about it
            log.exception("commitlog flush failed")
            self.failure = exc
            return -1

    def wait_durable(self, offset: int, timeout_ms: int) -> None:
        """Block until the commitlog is durable up to ``offset`` (sync mode).

        ``offset`` must be the end of an append that has returned. Appenders that arrive
        while a flush runs are covered by the next one, so a burst of concurrent appends
        shares one fdatasync (group commit). Raises StoreError if the flush failed and
        FlushTimeoutError after ``timeout_ms``.
        """
        if self._commitlog.flushed_offset >= offset:
            return
        if self.failure is not None:
            raise StoreError(f"commitlog flush failed: {self.failure}")
        waiter = threading.Lock()
        waiter.acquire()
        with self._mutex:
            self._pending.append((offset, waiter))
        self._work.set()
        woken = waiter.acquire(timeout=timeout_ms / 1000)
        if not woken:
            with self._mutex:  # still listed unless a release is on its way
                self._pending = [w for w in self._pending if w[1] is not waiter]
        if self.failure is not None:
            raise StoreError(f"commitlog flush failed: {self.failure}")
        if self._commitlog.flushed_offset < offset:
            raise FlushTimeoutError(
                f"sync flush did not reach offset {offset} within {timeout_ms} ms"
            )

    def stop(self) -> None:
        self._running = False
        self._work.set()
        self.thread.stop()
        self._commitlog.flush()
        with self._mutex:  # nobody is left waiting on a thread that has gone
            batch, self._pending = self._pending, []
        for _offset, waiter in batch:
            waiter.release()


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
            cp = cls(
                int(d["physical_flushed"]),
                int(d["dispatched"]),
                {
                    t: {q: [int(o[0]), int(o[1])] for q, o in qs.items()}
                    for t, qs in d["queue_offsets"].items()
                },
                int(d["written_ms"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return None, f"checkpoint has bad fields: {exc}"
        return cp, loaded.problem

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())


class DerivedFlusher:
    """Periodically flushes consume queues and index, then writes the checkpoint.

    A failed round is logged and retried next interval (``thread.last_error`` meanwhile).
    """

    def __init__(self, interval_ms: int, flush_and_checkpoint: Callable[[], None]) -> None:
        self.thread = ServiceThread("derived-flush", flush_and_checkpoint, interval_ms=interval_ms)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()
