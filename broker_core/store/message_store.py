"""The message store: the one object the broker uses to append and read messages.

>>> import tempfile
>>> from broker_core.config import StoreConfig
>>> from broker_core.message import Message
>>> store = MessageStore(StoreConfig(tempfile.mkdtemp(), 1 << 20, max_body_bytes=1024))
>>> report = store.open()
>>> [r.queue_offset for r in store.put_messages([Message("orders", b"hello")])]
[0]
>>> store.wait_dispatched()
True
>>> store.get_messages(QueueRead("orders", 0, 0, 10)).messages[0].body
b'hello'
>>> store.close()

Lifecycle: ``open()`` recovers (see ``recovery``) and starts the background threads
(dispatch, commitlog flush, derived flush, retention); ``close()`` stops them, flushes
everything, writes the checkpoint and removes the ``abort`` marker, so the next open
knows the shutdown was clean. All public methods are thread-safe.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from broker_core.clock import now_ms
from broker_core.config import FlushMode, Role, StoreConfig
from broker_core.errors import (
    BusyError,
    CorruptionError,
    MessageNotFoundError,
    NotMasterError,
    OffsetOutOfRangeError,
    StoreClosedError,
    StoreError,
)
from broker_core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
    decode_offset_message_id,
)
from broker_core.service_thread import ServiceThread
from broker_core.store.appended import Appended
from broker_core.store.cleanup import CleanupReport, CleanupService, disk_used_ratio
from broker_core.store.columns import ColumnBatch, encode_messages
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import ConsumeQueueSet
from broker_core.store.dispatch import Dispatcher, Listener
from broker_core.store.flush import Checkpoint, CommitLogFlusher, DerivedFlusher
from broker_core.store.index_service import IndexService
from broker_core.store.lock import StoreLock
from broker_core.store.put_combiner import PutCombiner
from broker_core.store.put_result import PutResult, results_of
from broker_core.store.queue_read import (
    GetResult,
    QueueRead,
    raw_of,
    read_messages,
    read_raw,
    start_read,
)
from broker_core.store.raw_read import RawUnits
from broker_core.store.recovery import RecoveryReport, recover
from broker_core.store.replica import adopt_queues, append_replica

log = logging.getLogger(__name__)
TopicOf = Callable[[StoredMessage], str]  # the topic a query by topic also matches a message by
_PHYSICAL_MEMORY_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _units_bytes(batches: Sequence[ColumnBatch]) -> int:
    return sum(len(b.units) for b in batches)


class MessageStore:
    """Commitlog, consume queues, index and their services behind one facade."""

    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int] = now_ms) -> None:
        self.config = config
        self._clock_ms = clock_ms
        root = Path(config.store_dir)
        root.mkdir(parents=True, exist_ok=True)
        self._abort_path = root / "abort"
        self._lock = StoreLock(root)
        self._checkpoint_path = root / "checkpoint"
        self._checkpoint_lock = threading.Lock()  # the derived flusher and callers both write it
        host = (config.store_host, config.store_port)
        self._store_host = host
        self.commitlog = CommitLog(config.commitlog_dir, config.segment_size_bytes, host)
        self.queues = ConsumeQueueSet(config.consume_queue_dir, config.consume_queue_units_per_file)
        self.index = IndexService(
            config.index_dir, config.index_slot_count, config.index_max_entries
        )
        self.dispatcher = Dispatcher(self.commitlog, self.queues, self.index)
        self.flusher = CommitLogFlusher(
            self.commitlog,
            sync=config.flush_mode is FlushMode.SYNC,
            interval_ms=config.flush_interval_ms,
        )
        # Sync flush: concurrent puts share the lead, the dispatch and the fdatasync
        # (``put_combiner``): encoded batches here, and ``put_messages`` calls in front
        self._batches: PutCombiner[ColumnBatch, Sequence[ColumnBatch], int | Exception] | None = (
            PutCombiner(lambda batches: batches, self._put_batches, weigh=_units_bytes)
            if self.flusher.sync
            else None
        )
        self._combiner: PutCombiner[Message, ColumnBatch, PutResult] = PutCombiner(
            self._encode, self._store_encoded, inner=self._batches
        )
        self._derived = DerivedFlusher(config.derived_flush_interval_ms, self.checkpoint)
        self.cleanup = CleanupService(
            self.commitlog,
            self.queues,
            self.index,
            file_reserved_hours=config.file_reserved_hours,
            disk_max_used_ratio=config.disk_max_used_ratio,
            safe_offset=lambda: min(
                self.commitlog.flushed_offset, self.dispatcher.dispatched_offset
            ),
        )
        self._open = False
        self.recovery: RecoveryReport | None = None
        self.disk_ratio: Callable[[], float] = lambda: disk_used_ratio(str(root))
        self._disk_checked_at = -1.0
        self._disk_full = False
        # Broker groups (``ha``): a slave's store refuses client writes (``set_role``); a
        # master's hook gets each append's end offset (wakes HA senders; sync replication
        # waits in the broker)
        self.role = Role.MASTER
        self._not_master = ""
        self.after_append: Callable[[int], None] | None = None

    # ---- lifecycle --------------------------------------------------------------------

    def set_role(self, role: Role, refusal: str = "") -> None:
        """A slave's store refuses client writes with NotMasterError(``refusal``); a
        master's takes them (``append_replica`` stores a slave's copy either way)."""
        self._not_master = refusal or "this store is a slave's copy: send to its master"
        self.role = role

    def acquire_lock(self) -> None:
        """Take the store directory's lock (``store.lock``; StoreLockedError when another
        process has it): a broker's first step, before anything else under the directory."""
        self._lock.acquire()

    def open(self) -> RecoveryReport:
        """Lock the directory, recover and start the background services."""
        self._lock.acquire()
        try:
            return self._open_locked()
        except BaseException:
            self._lock.release()
            raise

    def _open_locked(self) -> RecoveryReport:
        abnormal = self._abort_path.exists()
        self.recovery = recover(
            checkpoint_path=self._checkpoint_path,
            abnormal=abnormal,
            commitlog=self.commitlog,
            queues=self.queues,
            index=self.index,
            dispatcher=self.dispatcher,
        )
        if abnormal or self.recovery.dropped_bytes or self.recovery.rebuilt_queues:
            log.warning("store recovery: %s", self.recovery.summary())
        self.checkpoint()
        self._abort_path.touch()
        self.dispatcher.start()
        self.flusher.start()
        self._derived.start()
        self.cleanup.start(self.config.cleanup_interval_ms, self._clock_ms)
        self._open = True
        return self.recovery

    def close(self) -> None:
        """Stop services, flush everything, mark the shutdown clean and unlock."""
        if not self._open:
            self._lock.release()  # locked by acquire_lock() but never opened
            return
        self._open = False
        self.cleanup.stop()
        self._derived.stop()
        self.dispatcher.stop()
        self.flusher.stop()
        self.checkpoint()
        self.queues.close()
        self.index.close()
        self.commitlog.close()
        self._abort_path.unlink(missing_ok=True)
        self._lock.release()

    @property
    def is_open(self) -> bool:
        """True between a successful ``open()`` and ``close()``."""
        return self._open

    def checkpoint(self) -> None:
        """Flush consume queues and index, then record what recovery may rely on.

        Calls are serialised: two writers would race on the checkpoint's temporary file.
        """
        with self._checkpoint_lock:
            dispatched, table = self.dispatcher.snapshot()
            self.queues.flush()
            self.index.flush()
            Checkpoint(self.commitlog.flushed_offset, dispatched, table, self._clock_ms()).save(
                self._checkpoint_path
            )

    def _check_writable(self) -> None:
        if not self._open:
            raise StoreClosedError("message store is not open")
        if self.role is Role.SLAVE:
            raise NotMasterError(self._not_master)
        failure = self.dispatcher.failure or self.flusher.failure
        if failure is not None:
            raise StoreError(f"store is failing, refusing writes: {failure}")
        appended = self.commitlog.max_offset
        if appended - self.dispatcher.dispatched_offset > self.config.max_dispatch_lag_bytes:
            raise BusyError("broker busy: dispatch is behind, retry later")
        if appended - self.commitlog.flushed_offset > self.config.max_flush_lag_bytes:
            raise BusyError("broker busy: flush is behind, retry later")
        now = time.monotonic()
        if now - self._disk_checked_at > 0.5:  # a statvfs at most twice a second
            self._disk_checked_at = now
            self._disk_full = self.disk_ratio() > self.config.disk_full_ratio
        if self._disk_full:
            raise BusyError(
                f"broker busy: disk is more than {self.config.disk_full_ratio:.0%} full, "
                "retry later"
            )

    # ---- writing ------------------------------------------------------------------------

    def put_message(self, message: Message) -> PutResult:
        return self.put_messages((message,))[0]

    def put_messages(self, messages: Sequence[Message]) -> list[PutResult]:
        """Append messages in order, atomically validated: a bad one fails the whole call.

        The per-message API (retry, DLQ, timers, transactions): the messages are encoded
        as one batch (``columns.encode_messages``) and stored by :meth:`put_batch`. With
        ``flush_mode = sync`` this returns only once the batch is durable, and concurrent
        calls share one batch (``put_combiner``: each call is still validated, stored and
        answered as if alone).
        """
        if not messages:
            self._check_writable()
            return []
        if self.flusher.sync:
            return self._combiner.put(messages)
        return self._store_encoded(messages, self._encode(messages))

    def _encode(self, messages: Sequence[Message]) -> ColumnBatch:
        cfg = self.config
        return encode_messages(
            messages,
            max_body_bytes=cfg.max_body_bytes,
            max_properties_bytes=cfg.max_properties_bytes,
        )

    def _store_encoded(self, messages: Sequence[Message], batch: ColumnBatch) -> list[PutResult]:
        """:meth:`put_batch` of ``messages`` encoded as ``batch``; one result per message."""
        return results_of(messages, batch, self.put_batch(batch), self._store_host)

    def put_batch(self, batch: ColumnBatch) -> int:
        """Append an encoded batch (``columns``): the one put every send ends in.

        Returns the store timestamp given to the batch; ``batch.head`` then holds each
        message's queue and physical offset. Validated when it was encoded; with
        ``flush_mode = sync`` this returns only once the batch is durable. Raises
        BusyError, StoreError, NotMasterError or StoreClosedError when the store cannot
        take writes, DiskFullError when a new segment cannot be made (nothing stored).
        With sync flush concurrent calls combine (``put_combiner``); with async flush they
        do not (a lone leader doing every caller's append measured slower than the
        callers appending side by side: 16 threads, 1.3–6.7× fewer puts a second).
        """
        if self._batches is None or not len(batch):
            outcome = self._put_batches((batch,))[0]
        else:  # sync: combined with concurrent puts (``put_combiner``)
            outcome = self._batches.put((batch,))[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _put_batches(
        self, batches: Sequence[ColumnBatch], _encoded: object = None
    ) -> list[int | Exception]:
        """Append ``batches`` back to back, dispatch once, wait once until they are durable
        (sync); per batch its store timestamp, or the error that refused it alone (its
        append stored nothing). An error of the shared steps is raised for all."""
        self._check_writable()
        now = self._clock_ms()
        outcomes: list[int | Exception] = []
        end = -1
        for batch in batches:
            if not len(batch):
                outcomes.append(now)
                continue
            try:
                end = self.commitlog.append(batch, now)
            except Exception as exc:  # e.g. DiskFullError: nothing of this batch stored
                outcomes.append(exc)
            else:
                outcomes.append(now)
        if end < 0:
            return outcomes
        self.dispatcher.dispatch_inline()
        if self.flusher.sync:
            self.flusher.wait_durable(end, self.config.sync_flush_timeout_ms)
        if self.after_append is not None:
            self.after_append(end)
        return outcomes

    def append_replica(self, offset: int, data: bytes) -> int:
        """A slave stores its master's commitlog bytes at the same offsets (``replica``).

        Returns how many bytes of ``data`` are now stored (the rest is an incomplete
        unit); ReplicationProtocolError for a gap, a differing overlap or a bad unit.
        Dispatch builds consume queues and index from the stored units.
        """
        if not self._open:
            raise StoreClosedError("message store is not open")
        done = append_replica(self.commitlog, offset, data)
        if done:  # the dispatch thread builds queues and index: the ack need not wait
            self.dispatcher.notify_appended()
        return done

    def adopt_replicated_queues(self, timeout_s: float = 10.0) -> dict[str, int]:
        """A slave about to take writes: wait until its replicated bytes are dispatched,
        then take each queue's next offset from its consume queue, whatever its topic
        table says (``append_replica`` assigns none; recovery does the same). Returns
        topic -> highest queue id held + 1; StoreError if dispatch does not catch up."""
        if not self.wait_dispatched(timeout_s):
            raise StoreError(f"dispatch did not catch up within {timeout_s:.0f} s")
        return adopt_queues(self.queues, self.commitlog)

    # ---- reading ------------------------------------------------------------------------

    def wait_dispatched(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything appended so far is visible to readers."""
        return self.dispatcher.wait_dispatched(self.commitlog.max_offset, timeout_s)

    def add_append_observer(self, observer: Callable[[Appended], None]) -> None:
        """See ``Dispatcher.add_append_observer`` (message trace's Stored records)."""
        self.dispatcher.add_append_observer(observer)

    def add_dispatch_listener(self, listener: Listener) -> None:
        """``listener(topic, queue_id, max_offset)`` runs on the dispatch thread."""
        self.dispatcher.add_listener(listener)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next logical offset to be dispatched (messages are below it)."""
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset if cq else 0

    def in_memory(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether a queue's message is within ``access_message_in_memory_max_ratio`` of
        physical memory from the log's end (RocketMQ's ``checkInMemByConsumeOffset``)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return False
        window = self.config.access_message_in_memory_max_ratio * _PHYSICAL_MEMORY_BYTES
        return self.commitlog.max_offset - cq.get_unit(offset)[0] <= window

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(cq.queue_id for cq in self.queues.all() if cq.topic == topic)

    def topics(self) -> list[str]:
        return sorted({cq.topic for cq in self.queues.all()})

    def get_messages(self, read: QueueRead) -> GetResult:
        """Read up to ``read.max_count`` messages from ``read.offset``.

        ``read.tag_filter`` is checked against each unit's tag code before the commitlog is
        touched; ``read.message_filter`` confirms on the decoded message. Offsets below the
        queue's minimum or above its maximum raise OffsetOutOfRangeError; ``offset ==
        max`` returns no messages. ``next_offset`` is where the following read starts.
        """
        cq, result = start_read(self.queues, read)
        if cq is not None and read.offset < result.max_offset:
            read_messages(cq, self.commitlog, read, result)
        return result

    def get_raw(self, read: QueueRead) -> GetResult:
        """:meth:`get_messages`, but the result's ``raw`` holds the units as stored.

        Unfiltered reads never decode a message (see ``raw_read``); filtered reads decode
        to filter, then hand out the matching units' bytes.
        """
        if read.filtered:
            return raw_of(self.commitlog, self.get_messages(read))
        cq, result = start_read(self.queues, read)
        if cq is None or read.offset == result.max_offset:
            result.raw = RawUnits.empty()
        else:
            read_raw(cq, self.commitlog, read, result)
        return result

    def read_message(
        self, physical_offset: int, size: int = 0, *, max_size_bytes: int = 0
    ) -> StoredMessage:
        """The message at a commitlog offset (verified; see ``CommitLog.read_message``)."""
        return self.commitlog.read_message(physical_offset, size, max_size_bytes=max_size_bytes)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (max offset if none)."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_for_timestamp(timestamp_ms, self.commitlog.read_store_timestamp)

    def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            raise OffsetOutOfRangeError(f"no queue {topic}:{queue_id}", min_offset=0, max_offset=0)
        return self.commitlog.read_store_timestamp(cq.get_unit(offset)[0])

    # ---- queries --------------------------------------------------------------------------

    def query_by_key(
        self,
        key: str,
        *,
        topic: str | None = None,
        max_results: int = 64,
        begin_ms: int = 0,
        end_ms: int = 2**62,
        topic_of: TopicOf | None = None,
    ) -> list[StoredMessage]:
        """Messages whose keys (or message id) include ``key``, newest first.

        With ``topic``, only messages stored in that topic or, given ``topic_of``, those
        ``topic_of(message)`` names (the broker passes the topic a message it holds back is
        for: the store knows nothing of holding)."""
        found: list[StoredMessage] = []
        for phys in self.index.query(key, begin_ms, end_ms, max_results * 4):
            if phys < self.commitlog.min_offset:
                continue
            try:
                msg = self.commitlog.read_message(phys)
            except (CorruptionError, OffsetOutOfRangeError):
                continue  # a stale index entry: never serve what does not verify
            matches = key in msg.keys or msg.properties.get(PROPERTY_UNIQ_KEY) == key
            if matches and topic in (None, msg.topic, topic_of and topic_of(msg)):
                found.append(msg)
                if len(found) >= max_results:
                    break
        return found

    def query_by_id(
        self, message_id: str, topic: str | None = None, *, topic_of: TopicOf | None = None
    ) -> StoredMessage:
        """Look a message up by its client id (UNIQ_KEY) or by its offset message id
        (``topic`` and ``topic_of`` as for :meth:`query_by_key`)."""
        hits = self.query_by_key(message_id, topic=topic, max_results=1, topic_of=topic_of)
        if hits:
            return hits[0]
        try:  # an offset id names the store host and offset: both must be the unit's
            host, phys = decode_offset_message_id(message_id)
            found = self.commitlog.read_message(phys)
            if found.store_host == host and topic in (None, found.topic):
                return found
        except (ValueError, CorruptionError, OffsetOutOfRangeError):
            pass
        raise MessageNotFoundError(f"no message with id {message_id}")

    # ---- administration -------------------------------------------------------------------

    def delete_topic(self, topic: str) -> None:
        """Forget a topic's queues (its bytes leave the commitlog with retention)."""
        for qid in self.queue_ids(topic):
            self.queues.remove(topic, qid)
        self.commitlog.queue_offsets.remove_topic(topic)

    def service_threads(self) -> list[ServiceThread]:
        """The store's background threads: dispatch, commitlog flush, derived flush, cleanup."""
        return [
            self.dispatcher.thread,
            self.flusher.thread,
            self._derived.thread,
            self.cleanup.thread,
        ]

    def run_cleanup(self, now: int | None = None) -> CleanupReport:
        return self.cleanup.run_once(self._clock_ms() if now is None else now)
