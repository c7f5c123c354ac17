"""Dispatch (RocketMQ's "reput"): build consume queues and the index from the commitlog.

One thread follows the commitlog's write position. For each new unit it writes the
consume-queue unit and the index entries, then tells listeners which queues grew — the
broker's long polling parks pulls on exactly that signal. Readers only see messages
whose consume-queue unit is written, so a message becomes visible once it is dispatched.

Prepared and rolled-back transaction units are indexed but never enter a consume queue.

Threads: ``run`` is the dispatch thread. ``dispatch_range`` is called directly only
during recovery, before the thread starts. ``snapshot`` and ``wait_dispatched`` may be
called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from broker_core.store import codec
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import ConsumeQueueSet
from broker_core.store.index_file import IndexService

log = logging.getLogger(__name__)

Listener = Callable[[str, int, int], None]  # (topic, queue id, new max offset)
_NOT_IN_QUEUE = (codec.SYSFLAG_TRANSACTION_PREPARED, codec.SYSFLAG_TRANSACTION_ROLLBACK)
_CHUNK_BYTES = 4 << 20


class Dispatcher:
    """Follows the commitlog and keeps consume queues and index up to date."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexService):
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self.dispatched_offset = 0
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()  # held while a chunk is dispatched
        self._wakeup = threading.Condition()
        self._progress = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def add_listener(self, listener: Listener) -> None:
        self._listeners = [*self._listeners, listener]

    # ---- the work ---------------------------------------------------------------------

    def dispatch_range(
        self,
        start: int,
        end: int,
        *,
        only_queues: Collection[tuple[str, int]] | None = None,
        queues: bool = True,
        index: bool = True,
        verify: bool = False,
    ) -> dict[tuple[str, int], int]:
        """Dispatch units in ``[start, end)``; returns the new max offset of each queue touched."""
        grown: dict[tuple[str, int], int] = {}
        for buf, pos, _phys in self._commitlog.iter_units(start, end, verify=verify):
            req = codec.dispatch_request(buf, pos)
            key = (req.topic, req.queue_id)
            in_queue = (req.sys_flag & codec.SYSFLAG_TRANSACTION_MASK) not in _NOT_IN_QUEUE
            if queues and in_queue and (only_queues is None or key in only_queues):
                cq = self._queues.find_or_create(req.topic, req.queue_id)
                cq.put(req.queue_offset, req.physical_offset, req.size, req.tags_code)
                grown[key] = cq.max_offset
            if index and req.keys:
                self._index.put_keys(req.keys, req.physical_offset, req.store_timestamp_ms)
        return grown

    def dispatch_available(self) -> int:
        """Dispatch what has been appended since the last call; returns bytes dispatched."""
        with self._lock:
            start = self.dispatched_offset
            end = min(self._commitlog.max_offset, start + _CHUNK_BYTES)
            if end <= start:
                return 0
            grown = self.dispatch_range(start, end)
            self.dispatched_offset = end
        with self._progress:
            self._progress.notify_all()
        for (topic, queue_id), max_offset in grown.items():
            for listener in self._listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:  # a listener's bug must not stop dispatch
                    log.exception("dispatch listener failed")
        return end - start

    # ---- the thread -------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="dispatch", daemon=True)
        self._thread.start()

    def notify_appended(self) -> None:
        with self._wakeup:
            self._wakeup.notify()

    def _run(self) -> None:
        try:
            while self._running:
                if self.dispatch_available() == 0:
                    with self._wakeup:
                        if self._commitlog.max_offset <= self.dispatched_offset:
                            self._wakeup.wait(0.05)
        except BaseException as exc:  # recorded so the store refuses writes loudly
            log.exception("dispatch thread died")
            self.failure = exc
            with self._progress:
                self._progress.notify_all()

    def stop(self) -> None:
        """Stop the thread after dispatching everything already appended."""
        self._running = False
        self.notify_appended()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.failure is None:
            while self.dispatch_available():
                pass

    # ---- observers --------------------------------------------------------------------

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until everything below ``offset`` is dispatched; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while self.dispatched_offset < offset and self.failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(remaining)
        return self.dispatched_offset >= offset

    def snapshot(self) -> tuple[int, dict[str, dict[str, list[int]]]]:
        """(dispatched offset, {topic: {queue id: [min, max]}}) taken consistently."""
        with self._lock:
            table: dict[str, dict[str, list[int]]] = {}
            for cq in self._queues.all():
                table.setdefault(cq.topic, {})[str(cq.queue_id)] = [cq.min_offset, cq.max_offset]
            return self.dispatched_offset, table
