"""Reads from one consume queue: decoded messages through the filters, or raw units.

A read is one frozen :class:`QueueRead` (topic, queue, ``offset``, ``max_count``,
``max_bytes`` and the two filters) that the store passes on whole. It starts at a logical
``offset`` of one queue (:func:`start_read` checks it against the queue's bounds) and fills a
:class:`GetResult`:

* :func:`read_messages` walks the queue's units: ``tag_filter`` is checked against each
  unit's tag code before the commitlog is touched, ``message_filter`` confirms on the
  decoded (verified) message. It stops at ``max_count`` messages, at ``max_bytes`` (the
  first message always fits), after ``MAX_SCAN_UNITS`` units inspected, or at the end of
  the queue. A unit that does not verify raises CorruptionError when the read starts at it;
  after some messages it ends the read there, so what came before is served first.
* :func:`read_raw` hands out the units as stored (``raw_read``), never decoding;
  :func:`raw_of` turns a filtered decoded read into the same raw form.

``next_offset`` is where the following read starts; ``scanned`` and ``filtered`` count
the units inspected and rejected. Stateless; any thread (the consume queue and commitlog
are thread-safe for readers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from broker_core.errors import CorruptionError, InvalidOffsetError, OffsetOutOfRangeError
from broker_core.message import StoredMessage
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import UNIT, ConsumeQueue, ConsumeQueueSet
from broker_core.store.raw_read import RawUnits, queue_units, read_spans, within_bytes

TagCodeFilter = Callable[[int], bool]
MessageFilter = Callable[[StoredMessage], bool]
MAX_SCAN_UNITS = 16_384  # units a filtered read inspects before returning what it found
DEFAULT_READ_MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class QueueRead:
    """One read of one queue: up to ``max_count`` messages (about ``max_bytes``) from
    ``offset``, through ``tag_filter`` (on the unit's tag code) and ``message_filter`` (on
    the decoded message); ``None`` filters pass everything.

    InvalidOffsetError at construction for a negative offset or queue id, or for
    ``max_count`` or ``max_bytes`` below 1.
    """

    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int = DEFAULT_READ_MAX_BYTES
    tag_filter: TagCodeFilter | None = None
    message_filter: MessageFilter | None = None

    def __post_init__(self) -> None:
        if self.offset < 0 or self.queue_id < 0 or self.max_count < 1 or self.max_bytes < 1:
            raise InvalidOffsetError(
                f"bad read of {self.topic}:{self.queue_id}: offset {self.offset}, "
                f"max_count {self.max_count}, max_bytes {self.max_bytes}"
            )

    @property
    def filtered(self) -> bool:
        """True when either filter is set (the read must decode to filter)."""
        return self.tag_filter is not None or self.message_filter is not None


@dataclass(slots=True)
class GetResult:
    """A read from one queue: matching messages and where the next read starts."""

    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
    scanned: int = 0
    filtered: int = 0
    total_bytes: int = 0
    raw: RawUnits | None = None  # set by get_raw: the units instead of decoded messages

    @property
    def found(self) -> int:
        """Messages delivered, decoded or raw."""
        return self.raw.count if self.raw is not None else len(self.messages)


def start_read(queues: ConsumeQueueSet, read: QueueRead) -> tuple[ConsumeQueue | None, GetResult]:
    """The queue and an empty result for ``read`` at its offset.

    OffsetOutOfRangeError (with the bounds) outside ``[min, max]``. A queue that does not
    exist reads as empty.
    """
    topic, queue_id, offset = read.topic, read.queue_id, read.offset
    cq = queues.get(topic, queue_id)
    lo, hi = (cq.min_offset, cq.max_offset) if cq else (0, 0)
    if offset < lo or offset > hi:
        raise OffsetOutOfRangeError(
            f"offset out of range (min is {lo}, max is {hi}): {topic}:{queue_id} offset {offset}",
            min_offset=lo,
            max_offset=hi,
        )
    return cq, GetResult([], offset, lo, hi)


def read_messages(
    cq: ConsumeQueue, commitlog: CommitLog, read: QueueRead, result: GetResult
) -> None:
    """Fill ``result`` (fresh from :func:`start_read`) with decoded, filtered messages."""
    hi, max_count = result.max_offset, read.max_count
    while result.next_offset < hi and len(result.messages) < max_count:
        if result.scanned >= MAX_SCAN_UNITS or result.total_bytes >= read.max_bytes:
            break
        raw = cq.read_units(result.next_offset, min(max_count * 4, 4096))
        if not raw or _read_units(commitlog, raw, read, result):
            break


def _read_units(commitlog: CommitLog, raw: bytes, read: QueueRead, result: GetResult) -> bool:
    """Read units into ``result``; True when a count or byte limit stopped it, or a unit
    that does not verify after some messages were read (they are served first)."""
    max_count, max_bytes = read.max_count, read.max_bytes
    tag_filter, message_filter = read.tag_filter, read.message_filter
    for phys, size, tag_code in UNIT.iter_unpack(raw):
        if len(result.messages) >= max_count:
            return True
        if result.messages and result.total_bytes + size > max_bytes:
            return True
        result.scanned += 1
        result.next_offset += 1
        if tag_filter is not None and not tag_filter(tag_code):
            result.filtered += 1
            continue
        try:
            msg = commitlog.read_message(phys, size)
        except CorruptionError:
            if not result.messages:
                raise  # the read starts at the bad unit: the caller must hear of it
            result.scanned -= 1  # serve what came before it; the next read starts there
            result.next_offset -= 1
            return True
        if message_filter is not None and not message_filter(msg):
            result.filtered += 1
            continue
        result.messages.append(msg)
        result.total_bytes += size
    return False


def read_raw(cq: ConsumeQueue, commitlog: CommitLog, read: QueueRead, result: GetResult) -> None:
    """Fill ``result`` (fresh from :func:`start_read`) with raw units, none decoded."""
    offset = result.next_offset
    units = queue_units(cq, offset, min(read.max_count, result.max_offset - offset))
    units = units[: within_bytes(units["size"], read.max_bytes)]
    sizes = units["size"].astype(np.int32)
    result.raw = RawUnits(read_spans(commitlog, units["phys"], sizes), sizes)
    result.scanned = len(units)
    result.next_offset = offset + len(units)
    result.total_bytes = len(result.raw.data)


def raw_of(commitlog: CommitLog, got: GetResult) -> GetResult:
    """``got`` with its decoded messages replaced by their units as stored."""
    phys = np.array([m.physical_offset for m in got.messages], np.int64)
    sizes = np.array([m.stored_size for m in got.messages], np.int32)
    got.raw = RawUnits(read_spans(commitlog, phys, sizes), sizes)
    got.messages = []
    return got
