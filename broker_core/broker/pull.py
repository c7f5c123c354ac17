"""Offset pull: read one queue from an offset, filtered on the broker, RocketMQ's way.

A pull names ``(topic, queue_id, offset)``, a batch size and optionally a subscription
filter: one frozen :class:`PullRequest`, which every layer passes on whole (the broker's
checks, long polling, the gRPC and remoting front ends); it builds the store's
:class:`~broker_core.store.queue_read.QueueRead` once (``PullRequest.read``). Tag
filters are checked first against the 8-byte tag hash in each consume-queue unit (the
commitlog is not touched for a unit whose hash cannot match), then confirmed on the decoded
message, because hashes can collide; SQL92 filters are evaluated on the decoded message's
properties.

Statuses and the corrected offset (:func:`classify_offset`, a pure function)::

    offset vs. queue [min, max)   status                 next_offset
    ---------------------------   --------------------   --------------------------------
    offset < min                  OFFSET_TOO_SMALL       min  (those messages are gone)
    offset == max                 NO_NEW_MESSAGE         offset (wait: long polling parks)
    offset > max                  OFFSET_OVERFLOW_BADLY  max  (the consumer ran ahead)
    min <= offset < max, a match  FOUND                  after the last unit inspected
    min <= offset < max, none     NO_MATCHED_MESSAGE     after the last unit inspected

An illegal offset is a result, not an exception: the consumer adopts ``next_offset`` and
pulls again, as RocketMQ's client does on OFFSET_ILLEGAL. ``PullResult.error`` keeps the
store's :class:`~broker_core.errors.OffsetOutOfRangeError` (its message names the queue,
the offset and the bounds) for logs and the wire. Old RocketMQ versions reset an overflowing
offset to 0 when the queue's minimum was 0; current versions use the maximum, and so do
we, so a consumer never re-reads a queue from the start because it ran ahead. A negative
offset raises InvalidOffsetError, a negative queue id or a batch size below 1
InvalidArgumentError (:mod:`broker_core.protocol.pull_args`).

A batch stops at ``max_count`` messages or before exceeding ``max_bytes``, but always
holds at least one message when one matches.

NO_MATCHED_MESSAGE can come back with ``next_offset < max_offset``: the store inspects a
bounded number of units per read, so a very selective filter may need several pulls.

Nothing here is durable and nothing needs recovery: a pull only reads the store. Every
method may be called from any thread (the store is thread-safe, the service is stateless).

>>> import tempfile
>>> from broker_core.config import StoreConfig
>>> from broker_core.protocol.filters import MessageFilter
>>> from broker_core.message import Message
>>> from broker_core.store.message_store import MessageStore
>>> store = MessageStore(StoreConfig(store_dir=tempfile.mkdtemp(), segment_size_bytes=1 << 20,
...                                  max_body_bytes=1024))
>>> _ = store.open()
>>> _ = store.put_messages([Message("t", b"a", properties={"TAGS": "A"}),
...                         Message("t", b"b", properties={"TAGS": "B"})])
>>> _ = store.wait_dispatched()
>>> only_b = MessageFilter("TAG", "B")
>>> result = PullService(store).execute(PullRequest("t", 0, 0, 10, filter=only_b))
>>> result.status.name, [m.body for m in result.messages], result.next_offset
('FOUND', [b'b'], 2)
>>> PullService(store).execute(PullRequest("t", 0, 7, 10)).status.name
'OFFSET_OVERFLOW_BADLY'
>>> store.close()
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from broker_core.errors import OffsetOutOfRangeError
from broker_core.message import StoredMessage
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.pull_args import check_pull_args
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import GetResult, QueueRead, TagCodeFilter
from broker_core.store.queue_read import MessageFilter as StoredMessageFilter
from broker_core.store.raw_read import RawUnits

DEFAULT_PULL_MAX_COUNT = 32
DEFAULT_PULL_MAX_BYTES = 4 << 20


class PullStatus(enum.Enum):
    """Outcome of one pull (RocketMQ's client PullStatus, with OFFSET_ILLEGAL split in two)."""

    FOUND = "FOUND"
    NO_NEW_MESSAGE = "NO_NEW_MESSAGE"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"

    @property
    def offset_illegal(self) -> bool:
        """True for RocketMQ's OFFSET_ILLEGAL: the consumer must move to ``next_offset``."""
        return self in (PullStatus.OFFSET_TOO_SMALL, PullStatus.OFFSET_OVERFLOW_BADLY)

    @property
    def empty(self) -> bool:
        """True when the offset was fine but nothing was delivered (long polling may park)."""
        return self in (PullStatus.NO_NEW_MESSAGE, PullStatus.NO_MATCHED_MESSAGE)


@dataclass(frozen=True, slots=True)
class PullRequest:
    """What a consumer asks for; ``filter=None`` means every message."""

    topic: str
    queue_id: int
    offset: int
    max_count: int = DEFAULT_PULL_MAX_COUNT
    filter: MessageFilter | None = None
    max_bytes: int = DEFAULT_PULL_MAX_BYTES
    raw: bool = False  # hand out the stored units (PullResult.raw), not decoded messages
    read: QueueRead = field(init=False, repr=False, compare=False)  # the store's read, built once

    def __post_init__(self) -> None:
        """Reject what no queue could answer (``protocol.pull_args``: the one place the
        arguments of every way in are checked); build ``read``."""
        check_pull_args(self.topic, self.queue_id, self.offset, self.max_count, self.max_bytes)
        tag_filter, message_filter = store_filters(self.filter)
        read = QueueRead(
            self.topic,
            self.queue_id,
            self.offset,
            self.max_count,
            self.max_bytes,
            tag_filter,
            message_filter,
        )
        object.__setattr__(self, "read", read)

    def at(self, offset: int) -> PullRequest:
        """The same request from another offset."""
        return dataclasses.replace(self, offset=offset)

    def capped(self, max_count: int) -> PullRequest:
        """The same request asking for at most ``max_count`` messages."""
        return (
            self if self.max_count <= max_count else dataclasses.replace(self, max_count=max_count)
        )


@dataclass(slots=True)
class PullResult:
    """Messages found and where the consumer's next pull starts.

    ``error`` is set only for illegal offsets and carries the store's explanation;
    ``scanned``/``filtered`` count consume-queue units inspected and rejected.
    """

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    error: OffsetOutOfRangeError | None = None
    scanned: int = 0
    filtered: int = 0
    raw: RawUnits | None = None  # for raw requests: the units found, as stored

    @property
    def problem(self) -> str:
        """Human-readable reason for an illegal offset, "" otherwise."""
        return str(self.error) if self.error is not None else ""


def classify_offset(offset: int, min_offset: int, max_offset: int) -> tuple[PullStatus | None, int]:
    """Status and corrected next offset for ``offset`` against a queue's bounds.

    Returns ``(None, offset)`` when the offset is inside ``[min, max)`` and the queue
    must be read to decide between FOUND and NO_MATCHED_MESSAGE.

    >>> [(s and s.name, n) for s, n in (classify_offset(o, 5, 10) for o in (3, 7, 10, 12))]
    [('OFFSET_TOO_SMALL', 5), (None, 7), ('NO_NEW_MESSAGE', 10), ('OFFSET_OVERFLOW_BADLY', 10)]
    """
    if offset < min_offset:
        return PullStatus.OFFSET_TOO_SMALL, min_offset
    if offset > max_offset:
        return PullStatus.OFFSET_OVERFLOW_BADLY, max_offset
    if offset == max_offset:
        return PullStatus.NO_NEW_MESSAGE, offset
    return None, offset


def status_of_read(found: int, scanned: int) -> PullStatus:
    """FOUND if anything matched; NO_MATCHED_MESSAGE if units were inspected and all
    rejected; NO_NEW_MESSAGE if no unit could be read (e.g. removed by retention)."""
    if found:
        return PullStatus.FOUND
    return PullStatus.NO_MATCHED_MESSAGE if scanned else PullStatus.NO_NEW_MESSAGE


def store_filters(
    message_filter: MessageFilter | None,
) -> tuple[TagCodeFilter | None, StoredMessageFilter | None]:
    """The store's two-stage filter for a subscription: tag-hash pre-check, then confirm."""
    if message_filter is None or message_filter.match_all:
        return None, None
    f = message_filter
    tag_filter = f.matches_hash if f.tag_filter is not None else None
    return tag_filter, lambda m: f.matches(m.tag, m.properties)


class PullService:
    """Offset pulls over a :class:`MessageStore`; stateless, any thread."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def execute(self, request: PullRequest) -> PullResult:
        """Pull up to ``request.max_count`` messages (and about ``request.max_bytes``) from
        ``request.offset``: the one way in, which long polling re-runs."""
        read = self._store.get_raw if request.raw else self._store.get_messages
        try:
            got = read(request.read)
        except OffsetOutOfRangeError as exc:
            return self._out_of_range(request, exc)
        return _result_of(got, request.offset)

    def empty_result(self, request: PullRequest, status: PullStatus) -> PullResult:
        """An answer with no messages at ``request.offset`` and the queue's current bounds."""
        lo = self._store.min_offset(request.topic, request.queue_id)
        hi = self._store.max_offset(request.topic, request.queue_id)
        return PullResult(status, request.offset, lo, hi)

    def _out_of_range(self, request: PullRequest, exc: OffsetOutOfRangeError) -> PullResult:
        # Re-read the logical bounds: the error may also come from a commitlog segment that
        # retention removed mid-read, whose bounds are physical offsets.
        lo = self._store.min_offset(request.topic, request.queue_id)
        hi = self._store.max_offset(request.topic, request.queue_id)
        status, next_offset = classify_offset(request.offset, lo, hi)
        if status is None:
            raise exc  # the offset is legal: the store failed for another reason
        if not status.offset_illegal:
            return PullResult(status, next_offset, lo, hi)  # the queue moved meanwhile
        return PullResult(status, next_offset, lo, hi, error=exc)


def _result_of(got: GetResult, offset: int) -> PullResult:
    if offset == got.max_offset:
        status = PullStatus.NO_NEW_MESSAGE
    else:
        status = status_of_read(got.found, got.scanned)
    return PullResult(
        status,
        got.next_offset,
        got.min_offset,
        got.max_offset,
        got.messages,
        scanned=got.scanned,
        filtered=got.filtered,
        raw=got.raw,
    )
