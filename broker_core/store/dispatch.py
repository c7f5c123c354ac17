"""Dispatch (RocketMQ's "reput"): build consume queues and the index from the commitlog.

One thread follows the commitlog's write position. For each new unit it writes the
consume-queue unit and the index entries, then tells listeners which queues grew — the
broker's long polling parks pulls on exactly that signal. Readers only see messages
whose consume-queue unit is written, so a message becomes visible once it is dispatched.

Work arrives two ways. While the store runs, each append hands where its messages went,
as columns (``appended.Appended``), to ``on_append`` (under the commitlog's put lock, so
in log order) and the appending thread dispatches them itself right after
(``dispatch_inline``) — no re-reading of bytes just written and no thread hand-over; a
queue's units of one batch are written as one block, the batch's index keys as one.
During recovery, or if the hand-off queue does not line up with the dispatched offset,
dispatch reads and parses the commitlog (``dispatch_range``); both paths produce the same
units. The dispatch thread is the safety
net: it polls every 50 ms for anything not yet dispatched.

Prepared and rolled-back transaction units are indexed but never enter a consume queue.

Threads: ``thread`` (a ``ServiceThread``) is the dispatch thread; appenders call
``dispatch_inline``; one lock serialises dispatching. ``dispatch_range`` is called
directly only during recovery, before the thread starts. ``snapshot`` and
``wait_dispatched`` may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

import numpy as np

from broker_core.errors import RocketMQError, StoreError
from broker_core.protocol import unit as layout
from broker_core.service_thread import ServiceThread
from broker_core.store import codec
from broker_core.store.appended import Appended
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import UNIT_DTYPE, ConsumeQueue, ConsumeQueueSet
from broker_core.store.index_service import IndexService

log = logging.getLogger(__name__)

Listener = Callable[[str, int, int], None]  # (topic, queue id, new max offset)
_CHUNK_BYTES = 4 << 20
_POLL_MS = 50  # the thread's safety-net poll when nothing was left to dispatch
_BLOCK_MIN_UNITS = 8  # fewer units of one queue than this are written one by one


def _queue_units(batch: Appended) -> np.ndarray:
    """Every message's consume-queue unit (UNIT_DTYPE), in batch order."""
    units = np.empty(len(batch.size), UNIT_DTYPE)
    units["phys"] = batch.physical_offset
    units["size"] = batch.size
    units["tag"] = batch.tags_code
    return units


class Dispatcher:
    """Follows the commitlog and keeps consume queues and index up to date."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueSet, index: IndexService):
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self.dispatched_offset = 0
        self._listeners: list[Listener] = []
        self._observers: list[Callable[[Appended], None]] = []  # add_append_observer
        self._lock = threading.Lock()  # held while a chunk is dispatched
        self._progress = threading.Condition()
        self._waiters = 0  # threads in wait_dispatched (guarded by _progress)
        self._running = False
        self._last_done = 0  # bytes the thread's last round dispatched
        # A retriable error (e.g. no room for a queue file) is retried every 0.5 s; any
        # other ends the thread, recorded, so the store refuses writes loudly.
        self.thread = ServiceThread(
            "dispatch",
            self._round,
            interval_ms=_POLL_MS,
            wait_first=False,
            next_wait_ms=self._idle_ms,
            error_backoff_ms=500,
            fatal=lambda exc: not (isinstance(exc, RocketMQError) and exc.retriable),
            on_failure=self._on_failure,
        )
        self._handed: deque[Appended] = deque()
        self._indexed_to = -1  # index keys of units below this commitlog offset are written

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
        max_bytes: int = 1 << 62,
    ) -> tuple[dict[tuple[str, int], int], int]:
        """Dispatch units from ``start`` towards ``end`` (both unit boundaries).

        Stops after about ``max_bytes``; returns the new max offset of each queue touched
        and the offset reached (where the next call resumes).
        """
        grown: dict[tuple[str, int], int] = {}
        progress = [start]
        for buf, pos, _phys in self._commitlog.iter_units(
            start, end, verify=verify, progress=progress
        ):
            req = codec.dispatch_request(buf, pos)
            key = (req.topic, req.queue_id)
            in_queue = (req.sys_flag & layout.SYSFLAG_TRANSACTION_MASK) not in layout.NOT_IN_QUEUE
            if queues and in_queue and (only_queues is None or key in only_queues):
                cq = self._queues.find_or_create(req.topic, req.queue_id)
                if cq.restarted_by(req.queue_offset, req.physical_offset):
                    cq = self._restart(req.topic, req.queue_id, req.queue_offset)
                cq.put(req.queue_offset, req.physical_offset, req.size, req.tags_code)
                grown[key] = cq.max_offset
            if index and req.keys and req.physical_offset >= self._indexed_to:
                self._index.put_keys(req.keys, req.physical_offset, req.store_timestamp_ms)
                self._indexed_to = req.physical_offset + 1
            if progress[0] - start >= max_bytes:
                break
        return grown, progress[0]

    def add_append_observer(self, observer: Callable[[Appended], None]) -> None:
        """``observer(appended)`` sees each live append, under the commitlog's put lock (so
        it must only hand the record over: message trace queues it for its own thread)."""
        self._observers = [*self._observers, observer]

    def _restart(self, topic: str, queue_id: int, offset: int) -> ConsumeQueue:
        """Drop a queue the log began again at ``offset`` (``ConsumeQueue.restarted_by``)."""
        log.warning(
            "consume queue %s:%d begins again at offset %d (topic made again on the master)",
            topic,
            queue_id,
            offset,
        )
        self._queues.remove(topic, queue_id)
        return self._queues.find_or_create(topic, queue_id)

    def on_append(self, appended: Appended) -> None:
        """The commitlog's append hook: queue the batch for dispatch."""
        self._handed.append(appended)
        for observe in self._observers:
            observe(appended)

    def _dispatch_handed(self, start: int) -> tuple[dict[tuple[str, int], int], int]:
        """Apply handed-off batches that continue exactly from ``start``."""
        grown: dict[tuple[str, int], int] = {}
        reached = start
        handed = self._handed
        while handed and handed[0].before == reached and reached - start < _CHUNK_BYTES:
            # Peek, apply, then pop: a batch that fails midway (no room for a new queue
            # file) stays first in line and is applied again (``_apply`` is idempotent).
            grown.update(self._apply(handed[0]))
            reached = self.dispatched_offset = handed.popleft().after  # kept if a later fails
        return grown, reached

    def _apply(self, batch: Appended) -> dict[tuple[str, int], int]:
        """Write one appended batch's queue units and index keys, a block per queue.

        Idempotent, so a batch that failed midway can be applied again: queue units
        already written are skipped, and so are the index keys of messages below
        ``_indexed_to`` (a failure inside one index batch may leave a few keys filed
        twice; queries drop duplicate offsets).
        """
        grown: dict[tuple[str, int], int] = {}
        all_units: np.ndarray | None = None  # every row's queue unit, made once if needed
        for key, rows in batch.queues.items():
            if len(rows) < _BLOCK_MIN_UNITS:  # a block's numpy set-up costs more
                cq = self._queues.find_or_create(*key)
                for row in rows:
                    cq.put(
                        int(batch.queue_offset[row]),
                        int(batch.physical_offset[row]),
                        int(batch.size[row]),
                        int(batch.tags_code[row]),
                    )
                grown[key] = cq.max_offset
                continue
            if all_units is None:
                all_units = _queue_units(batch)
            at: slice | list[int] = rows
            if rows[-1] - rows[0] == len(rows) - 1:  # side by side: views, not gathers
                at = slice(rows[0], rows[-1] + 1)
            first, last = int(batch.queue_offset[rows[0]]), int(batch.queue_offset[rows[-1]])
            if last - first != len(rows) - 1:
                raise StoreError(f"queue offsets of {key} are not consecutive in one batch")
            cq = self._queues.find_or_create(*key)
            cq.put_many(first, all_units[at])
            grown[key] = cq.max_offset
        keys, phys = batch.index_keys, batch.index_phys
        if phys and phys[0] < self._indexed_to:
            todo = [i for i, offset in enumerate(phys) if offset >= self._indexed_to]
            keys, phys = [keys[i] for i in todo], [phys[i] for i in todo]
        if keys:
            self._index.put_batch(keys, phys, batch.store_timestamp_ms)
            self._indexed_to = phys[-1] + 1
        return grown

    def dispatch_available(self, *, blocking: bool = True) -> int:
        """Dispatch what has been appended since the last call; returns bytes dispatched.

        With ``blocking=False`` it returns 0 at once if another thread is dispatching.
        """
        if not self._lock.acquire(blocking=blocking):
            return 0
        try:
            # A new slave's log starts at its master's first segment, not at 0.
            start = max(self.dispatched_offset, self._commitlog.min_offset)
            end = self._commitlog.max_offset
            if end <= start:
                return 0
            handed = self._handed
            while handed and handed[0].after <= start:
                handed.popleft()  # already dispatched by reading the log
            if handed and handed[0].before == start:
                grown, reached = self._dispatch_handed(start)
            else:
                # Read the log up to the next handed batch; if reading already went into
                # that batch (it was seen mid-append), read to its end instead.
                stop = (
                    end
                    if not handed
                    else handed[0].before
                    if handed[0].before > start
                    else handed[0].after
                )
                grown, reached = self.dispatch_range(start, stop, max_bytes=_CHUNK_BYTES)
            self.dispatched_offset = reached
        finally:
            self._lock.release()
        self._announce(grown)
        return reached - start

    def dispatch_inline(self) -> None:
        """Called by an appender after its append: dispatch on this thread, no hand-over.

        Waking the dispatch thread for every append costs two thread switches, more than
        the dispatch itself. If another thread holds the dispatch lock it will take this
        batch too: the loop re-checks the queue after every release, so a batch added
        while the lock was held is never left waiting for the background thread.
        """
        while self._handed and self._running:
            if self.dispatch_available(blocking=False) == 0:
                return

    def _announce(self, grown: dict[tuple[str, int], int]) -> None:
        # Waiters count themselves under _progress before they read dispatched_offset,
        # which was advanced before this read: one that this misses has seen the offset.
        if self._waiters:
            with self._progress:
                self._progress.notify_all()
        for (topic, queue_id), max_offset in grown.items():
            for listener in self._listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:  # a listener's bug must not stop dispatch
                    log.exception("dispatch listener failed")

    # ---- the thread -------------------------------------------------------------------

    def start(self) -> None:
        self._running = True
        self._commitlog.on_append = self.on_append
        self.thread.start()

    def notify_appended(self) -> None:
        self.thread.wake()

    @property
    def failure(self) -> BaseException | None:
        """What ended the dispatch thread (the store then refuses writes), or None."""
        return self.thread.failure

    def _round(self) -> None:
        # Never block on the lock: appenders dispatch inline and must not have
        # to hand the lock (and the GIL) back and forth with this thread.
        self._last_done = self.dispatch_available(blocking=False)

    def _idle_ms(self) -> float:
        return 0.0 if self._last_done else _POLL_MS

    def _on_failure(self, _exc: BaseException) -> None:
        with self._progress:  # waiters read ``failure`` and give up
            self._progress.notify_all()

    def stop(self) -> None:
        """Stop the thread after dispatching everything already appended."""
        self._commitlog.on_append = None
        self._running = False
        self.thread.stop()
        if self.failure is None:
            while self.dispatch_available():
                pass

    # ---- observers --------------------------------------------------------------------

    def wait_dispatched(self, offset: int, timeout_s: float) -> bool:
        """Block until everything below ``offset`` is dispatched; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            self._waiters += 1
            try:
                while self.dispatched_offset < offset and self.failure is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._progress.wait(remaining)
            finally:
                self._waiters -= 1
        return self.dispatched_offset >= offset

    def snapshot(self) -> tuple[int, dict[str, dict[str, list[int]]]]:
        """(dispatched offset, {topic: {queue id: [min, max]}}) taken consistently."""
        with self._lock:
            table: dict[str, dict[str, list[int]]] = {}
            for cq in self._queues.all():
                table.setdefault(cq.topic, {})[str(cq.queue_id)] = [cq.min_offset, cq.max_offset]
            return self.dispatched_offset, table
