"""POP in-flight state: the revive log that makes it durable and the table it rebuilds.

**Revive log.** Every POP state change is appended as one record, the body of a message
in ``REVIVE_TOPIC`` queue 0 of the store itself, so the commitlog stays the only truth
(its unit CRC covers these bytes; no second checksum). Only :class:`ReviveLog` writes that
queue. A record's queue offset there is its *revive offset*; the revive offset of a
CHECKPOINT is the *version* of the delivery it starts and goes into the receipt handle.
Records, big-endian::

    offset size field
    0      1    format         uint8   RECORD_FORMAT (1)
    1      1    kind           uint8   RecordKind: CHECKPOINT, or a resolution (ACK, ...)
    2      4    queue_id       int32
    6      8    queue_offset   int64   the message's offset in (topic, queue_id)
    14     8    anchor         int64   CHECKPOINT: replay must start at or before this
                                       revive offset to know everything popped after the
                                       message was first scanned; resolutions: -1
    22     8    resolves       int64   resolutions: version (checkpoint) they end; else -1
    30     8    time_ms        int64   CHECKPOINT: pop time; resolutions: when resolved
    38     8    invisible_ms   int64   CHECKPOINT: invisible duration from time_ms; else 0
    46     4    attempt        int32   CHECKPOINT: delivery attempt it starts (1 = first)
    50     1    group_length   uint8
    51     g    group          UTF-8   consumer group
    …      1    topic_length   uint8
    …      t    topic          UTF-8   queue topic (an original topic or ``%RETRY%{group}``)
    …      2    mgroup_length  uint16
    …      m    message_group  UTF-8   FIFO message group ("" when none)

**Recovery.** The service commits, per (group, topic, queue), the *consume offset* ``C``
(lowest offset in flight, withheld or not yet popped) and then a *replay start* ``R``
(the least anchor of everything live) to the ConsumerOffsetManager. Both only grow, and
``C`` is committed before ``R``, so any persisted snapshot pairs a ``C`` with an ``R`` at
or below the matching one: replaying from ``R`` sees a CHECKPOINT for every message at
or above ``C`` that was popped, and its resolution if it had one. :meth:`PopState.apply`
rebuilds the in-flight entries from those records and remembers offsets resolved at or
above ``C`` (``skip``), so the rescan from ``C`` neither loses an un-acked message nor
redelivers an acked one. Records below ``C`` are ignored. Memory is bounded by what is
in flight (plus the FIFO look-ahead window and, after a restart, the skip set).

Crash between records: a resolution written in the same ``put_messages`` call as the
retry/DLQ copy it accompanies comes after the copy, so a torn tail can only cause a
duplicate delivery, never a loss. Records are as durable as the store's flush mode.

Threads: none of these classes lock; the POP service calls them under its own lock.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from broker_core.broker.system_topics import REVIVE_TOPIC
from broker_core.errors import CorruptionError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore

RECORD_FORMAT = 1
REVIVE_QUEUE_ID = 0
RECORD = struct.Struct(
    ">"
    "B"  # 0   format
    "B"  # 1   kind
    "i"  # 2   queue_id
    "q"  # 6   queue_offset
    "q"  # 14  anchor
    "q"  # 22  resolves
    "q"  # 30  time_ms
    "q"  # 38  invisible_ms
    "i"  # 46  attempt
)
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_REPLAY_BATCH = 256

QueueKey = tuple[str, str, int]  # (group, queue topic, queue id)


class RecordKind(IntEnum):
    CHECKPOINT = 1  # a delivery starts (first pop, FIFO redelivery or invisible change)
    ACK = 2  # the consumer acked the delivery
    REVIVED = 3  # invisible time ended; a copy went to the retry topic
    DEAD_LETTERED = 4  # a copy went to the DLQ (retries exhausted or forwarded)
    DROPPED = 5  # the message left the store (retention) before it could be redelivered


@dataclass(frozen=True, slots=True)
class PopRecord:
    """One revive-log record; see the module docstring for the bytes."""

    kind: RecordKind
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    anchor: int = -1
    resolves: int = -1
    time_ms: int = 0
    invisible_ms: int = 0
    attempt: int = 0
    message_group: str = ""

    @property
    def key(self) -> QueueKey:
        return (self.group, self.topic, self.queue_id)

    def encode(self) -> bytes:
        group, topic, mgroup = self.group.encode(), self.topic.encode(), self.message_group.encode()
        return b"".join((
            RECORD.pack(RECORD_FORMAT, self.kind, self.queue_id, self.queue_offset, self.anchor,
                        self.resolves, self.time_ms, self.invisible_ms, self.attempt),
            _U8.pack(len(group)), group, _U8.pack(len(topic)), topic,
            _U16.pack(len(mgroup)), mgroup,
        ))  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes, revive_offset: int = -1) -> PopRecord:
        """Inverse of :meth:`encode`; CorruptionError names the revive offset if it fails."""
        try:
            fmt, kind, qid, offset, anchor, resolves, time_ms, inv_ms, attempt = (
                RECORD.unpack_from(raw)
            )
            group, pos = _name(raw, RECORD.size, _U8)
            topic, pos = _name(raw, pos, _U8)
            mgroup, pos = _name(raw, pos, _U16)
            if fmt != RECORD_FORMAT or pos != len(raw):
                raise ValueError(f"format {fmt}, {len(raw) - pos} trailing bytes")
            return cls(RecordKind(kind), group, topic, qid, offset, anchor, resolves, time_ms,
                       inv_ms, attempt, mgroup)  # fmt: skip
        except (struct.error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise CorruptionError(
                f"revive record at revive offset {revive_offset} does not decode: {exc}"
            ) from exc


def _name(raw: bytes, pos: int, length: struct.Struct) -> tuple[str, int]:
    (size,) = length.unpack_from(raw, pos)
    start = pos + length.size
    if start + size > len(raw):
        raise ValueError("name runs past the end of the record")
    return raw[start : start + size].decode(), start + size


class ReviveLog:
    """Appends and replays records in ``REVIVE_TOPIC`` queue 0 of a store."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.next_offset = 0  # revive offset the next appended record will get

    def open(self) -> None:
        """Learn where the log ends (call once the store is open and dispatched)."""
        self._store.wait_dispatched()
        self.next_offset = self._store.max_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID)

    def append(self, records: list[PopRecord], companions: list[Message] | None = None
               ) -> list[int]:  # fmt: skip
        """Append ``companions`` then ``records`` in one call; return the records' offsets."""
        head = list(companions or ())
        messages = head + [
            Message(REVIVE_TOPIC, r.encode(), queue_id=REVIVE_QUEUE_ID) for r in records
        ]
        results = self._store.put_messages(messages)[len(head) :]
        offsets = [r.queue_offset for r in results]
        if offsets:
            self.next_offset = offsets[-1] + 1
        return offsets

    def replay(self, start: int) -> Iterator[tuple[int, PopRecord]]:
        """Yield ``(revive offset, record)`` from ``start`` (clamped to what is retained)."""
        store = self._store
        offset = max(start, store.min_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID))
        end = store.max_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID)
        while offset < end:
            got = store.get_messages(REVIVE_TOPIC, REVIVE_QUEUE_ID, offset, _REPLAY_BATCH)
            for msg in got.messages:
                yield msg.queue_offset, PopRecord.decode(msg.body, msg.queue_offset)
            if got.next_offset <= offset:
                break
            offset = got.next_offset


@dataclass(slots=True)
class InFlight:
    """One message handed to a consumer and not yet acked."""

    key: QueueKey
    offset: int
    version: int  # revive offset of the current CHECKPOINT; must match the handle
    anchor: int
    pop_time_ms: int
    invisible_ms: int
    attempt: int
    message_group: str = ""
    expired: bool = False  # FIFO only: invisible time ended, visible again in place

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


@dataclass(slots=True)
class Withheld:
    """A FIFO message scanned past because its message group was busy."""

    anchor: int
    message_group: str


@dataclass(slots=True)
class QueueState:
    """What one group has popped from one queue.

    ``popped_to`` is the scan frontier; below it every offset is in flight, withheld,
    or done. ``skip`` holds done offsets at or above ``popped_to`` (learnt by replay).
    """

    key: QueueKey
    popped_to: int
    committed: int
    inflight: dict[int, InFlight] = field(default_factory=dict)
    withheld: dict[int, Withheld] = field(default_factory=dict)
    skip: dict[int, int] = field(default_factory=dict)  # offset -> checkpoint version
    expired: set[int] = field(default_factory=set)  # FIFO: in-flight offsets visible again
    busy_groups: dict[str, int] = field(default_factory=dict)  # FIFO: unexpired deliveries
    low_heap: list[int] = field(default_factory=list)  # over inflight ∪ withheld, lazy

    def consume_offset(self) -> int:
        """Lowest offset not yet done: everything below it may be forgotten."""
        low = self.low_heap
        while low and low[0] not in self.inflight and low[0] not in self.withheld:
            heapq.heappop(low)
        return min(low[0], self.popped_to) if low else self.popped_to

    def is_busy(self, message_group: str) -> bool:
        return bool(message_group) and self.busy_groups.get(message_group, 0) > 0

    def adjust_busy(self, message_group: str, delta: int) -> None:
        if message_group:
            count = self.busy_groups.get(message_group, 0) + delta
            if count > 0:
                self.busy_groups[message_group] = count
            else:
                self.busy_groups.pop(message_group, None)


class _Anchors:
    """A multiset of revive offsets with a cheap minimum (heap + counts, lazy deletion)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._heap: list[int] = []

    def add(self, anchor: int) -> None:
        if anchor not in self._counts:
            heapq.heappush(self._heap, anchor)
        self._counts[anchor] = self._counts.get(anchor, 0) + 1

    def remove(self, anchor: int) -> None:
        left = self._counts[anchor] - 1
        if left:
            self._counts[anchor] = left
        else:
            del self._counts[anchor]

    def min(self, default: int) -> int:
        while self._heap and self._heap[0] not in self._counts:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else default


class PopState:
    """All queues' in-flight tables, the deadline heap and the anchors bounding replay."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self._anchors = _Anchors()
        self._deadlines: list[tuple[int, int, QueueKey, int]] = []  # (deadline, version, ...)
        self._live = 0

    def queue(self, key: QueueKey, start_offset: Callable[[], int]) -> QueueState:
        """The state of ``key``, created at ``start_offset()`` on first use."""
        qs = self.queues.get(key)
        if qs is None:
            start = start_offset()
            qs = self.queues[key] = QueueState(key, start, start)
        return qs

    def inflight_count(self) -> int:
        return self._live

    def replay_start(self, default: int) -> int:
        """The revive offset a replay after a crash now would have to start from."""
        return self._anchors.min(default)

    # ---- transitions -------------------------------------------------------------------

    def deliver(self, qs: QueueState, entry: InFlight) -> None:
        """Record a new delivery of ``entry.offset`` (first pop, retake, or replayed)."""
        old = qs.inflight.get(entry.offset)
        if old is not None:
            self._forget(qs, old)
        else:
            withheld = qs.withheld.pop(entry.offset, None)
            if withheld is not None:
                self._anchors.remove(withheld.anchor)
            else:
                heapq.heappush(qs.low_heap, entry.offset)
        qs.inflight[entry.offset] = entry
        self._anchors.add(entry.anchor)
        qs.adjust_busy(entry.message_group, 1)
        self._live += 1
        self._push_deadline(entry)

    def resolve(self, qs: QueueState, entry: InFlight, *, remember: bool = False) -> None:
        """The delivery ended for good (ack, retry copy, DLQ). ``remember`` keeps a skip."""
        del qs.inflight[entry.offset]
        self._forget(qs, entry)
        if remember and entry.offset >= qs.popped_to:
            qs.skip[entry.offset] = entry.version
            self._anchors.add(entry.version)

    def expire(self, qs: QueueState, entry: InFlight) -> None:
        """FIFO: the message is visible again in place; its group stops being busy."""
        entry.expired = True
        qs.expired.add(entry.offset)
        qs.adjust_busy(entry.message_group, -1)

    def withhold(self, qs: QueueState, offset: int, anchor: int, message_group: str) -> None:
        qs.withheld[offset] = Withheld(anchor, message_group)
        self._anchors.add(anchor)
        heapq.heappush(qs.low_heap, offset)

    def drop_withheld(self, qs: QueueState, offset: int) -> None:
        self._anchors.remove(qs.withheld.pop(offset).anchor)

    def pass_skip(self, qs: QueueState, offset: int) -> None:
        self._anchors.remove(qs.skip.pop(offset))

    def _forget(self, qs: QueueState, entry: InFlight) -> None:
        self._anchors.remove(entry.anchor)
        if entry.expired:
            qs.expired.discard(entry.offset)
        else:
            qs.adjust_busy(entry.message_group, -1)
        self._live -= 1

    # ---- deadlines ---------------------------------------------------------------------

    def _push_deadline(self, entry: InFlight) -> None:
        heapq.heappush(self._deadlines, (entry.deadline_ms, entry.version, entry.key, entry.offset))
        if len(self._deadlines) > 2 * self._live + 1024:
            self._deadlines = [
                (e.deadline_ms, e.version, e.key, e.offset)
                for qs in self.queues.values() for e in qs.inflight.values() if not e.expired
            ]  # fmt: skip
            heapq.heapify(self._deadlines)

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[QueueState, InFlight]]:
        """Up to ``limit`` current, unexpired deliveries whose deadline is ``<= now_ms``."""
        due: list[tuple[QueueState, InFlight]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms and len(due) < limit:
            _deadline, version, key, offset = heapq.heappop(heap)
            qs = self.queues.get(key)
            entry = qs.inflight.get(offset) if qs else None
            if qs and entry and entry.version == version and not entry.expired:
                due.append((qs, entry))
        return due

    def requeue(self, entry: InFlight) -> None:
        """Put a due delivery back on the heap (its revive failed; a later tick retries)."""
        self._push_deadline(entry)

    def next_deadline_ms(self) -> int | None:
        return self._deadlines[0][0] if self._deadlines else None

    # ---- replay --------------------------------------------------------------------------

    def apply(self, revive_offset: int, record: PopRecord, start_offset: Callable[[], int]
              ) -> None:  # fmt: skip
        """Replay one record; ``start_offset`` gives a new queue's committed offset."""
        qs = self.queue(record.key, start_offset)
        if record.queue_offset < qs.popped_to:
            return  # resolved before the committed offset: nothing to rebuild
        if record.kind is RecordKind.CHECKPOINT:
            self.deliver(qs, InFlight(
                record.key, record.queue_offset, revive_offset, record.anchor, record.time_ms,
                record.invisible_ms, record.attempt, record.message_group,
            ))  # fmt: skip
            return
        entry = qs.inflight.get(record.queue_offset)
        if entry is not None and entry.version == record.resolves:
            self.resolve(qs, entry, remember=True)
