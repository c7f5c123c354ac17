"""Check-back of half messages: which are unresolved, when each is due for a check, what
a check asks the producer (:class:`CheckRequest`), and how far the broker's progress over
the half topic may safely advance. ``transaction`` is the service that uses all this.

State, and where it is durable
------------------------------
Nothing here is durable by itself; it is all derived from two topics and two offsets:

* ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 — one *half record* per prepared message, and one
  more each time a check-back re-puts it (``TRANSACTION_CHECK_TIMES`` + 1, check base
  time reset to the time of the check);
* ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 — one *op record* per finished half record
  (committed, rolled back, or superseded by its re-put copy): tag ``d``, body the half
  record's queue offset in ASCII decimal (RocketMQ 5 also joins several with commas,
  which ``records.parse_op_body`` accepts; the records themselves are built in ``records``);
* the half progress ``P``: every half record below ``P`` is finished;
* the op progress ``Q``: every op record below ``Q`` names a half record below ``P``.

``P`` and ``Q`` live in the ConsumerOffsetManager under ``TRANS_CHECK_GROUP`` (half topic
and op topic, queue 0). An older ``(P, Q)`` pair is always still valid — it only makes
recovery read more — so they may be persisted lazily, ``P`` committed before ``Q``.

Recovery (:func:`recover_ledger`) reads op records from ``Q`` and keeps only those naming
half records at or above ``P``, then reads half records from ``P``: each one without an op
record is unresolved. If a crash left two live records of one message id (a re-put copy
appended, its op record for the original not), the newer wins and the older is returned
for retirement. Memory: one :class:`LiveHalf` per unresolved message plus the finished
offsets at or above ``P``; op records below ``P`` are never held.

Only the TransactionService writes to the half and op topics, so half offsets arrive
in order; a put that failed after its record was appended (a sync flush that timed out)
leaves a record the ledger has not seen. ``advance`` stops at such a *gap* and the service
reads the record back from the store, so the ledger is always rebuilt from the log, never
trusted over it.

Threads: the pure functions may be called from anywhere. :class:`HalfLedger` is not
thread-safe: the TransactionService calls it only while holding its own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.broker.transaction.records import HALF_QUEUE_ID, OP_QUEUE_ID, OP_TAG, parse_op_body
from broker_core.errors import BusyError, InvalidArgumentError, StoreClosedError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from broker_core.protocol.properties import PROPERTY_CHECK_BASE_MS, PROPERTY_CHECK_IMMUNITY_S
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

_READ_BATCH = 256


# --------------------------------------------------------------------------- check policy


@dataclass(frozen=True, slots=True)
class LiveHalf:
    """What the ledger keeps of one unresolved half record (not the body)."""

    queue_offset: int
    physical_offset: int
    message_id: str
    transaction_id: str
    producer_group: str
    check_times: int
    due_ms: int  # broker clock time at which a check-back is due


def _int_property(props: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = props.get(key)
    if raw is None and default is not None:
        return default
    try:
        return int(raw or "")
    except ValueError:
        raise InvalidArgumentError(f"half message property {key}={raw!r} is not an int") from None


def check_due_ms(props: Mapping[str, str], check_timeout_ms: int) -> int:
    """When the half record with properties ``props`` is due for a check-back.

    The timeout counts from ``__TRANS_CHECK_BASE_MS``. Before the first check a positive
    ``CHECK_IMMUNITY_TIME_IN_SECONDS`` replaces ``check_timeout_ms`` (a malformed one is
    ignored, as RocketMQ does); later checks always wait ``check_timeout_ms``.
    """
    base_ms = _int_property(props, PROPERTY_CHECK_BASE_MS)
    if _int_property(props, PROPERTY_CHECK_TIMES, 0) == 0:
        raw = props.get(PROPERTY_CHECK_IMMUNITY_S, "")
        if raw.isdigit() and int(raw) > 0:
            return base_ms + int(raw) * 1000
    return base_ms + check_timeout_ms


def live_half_from(
    props: Mapping[str, str], queue_offset: int, physical_offset: int, check_timeout_ms: int
) -> LiveHalf:
    """Parse a half record's properties; InvalidArgumentError if a required one is bad."""
    for key in (PROPERTY_UNIQ_KEY, PROPERTY_TRANSACTION_ID, PROPERTY_PRODUCER_GROUP):
        if not props.get(key):
            raise InvalidArgumentError(f"half message at offset {queue_offset} has no {key}")
    check_times = _int_property(props, PROPERTY_CHECK_TIMES, 0)
    if check_times < 0:
        raise InvalidArgumentError(f"half message at offset {queue_offset}: negative check times")
    return LiveHalf(
        queue_offset,
        physical_offset,
        props[PROPERTY_UNIQ_KEY],
        props[PROPERTY_TRANSACTION_ID],
        props[PROPERTY_PRODUCER_GROUP],
        check_times,
        check_due_ms(props, check_timeout_ms),
    )


class CheckAction(Enum):
    WAIT = "wait"  # not due yet
    CHECK = "check"  # re-put with check times + 1 and ask the producer
    ROLLBACK = "rollback"  # checked max_check_times already: give up


def decide_check(half: LiveHalf, now_ms: int, max_check_times: int) -> CheckAction:
    """What to do with an unresolved half at ``now_ms`` (RocketMQ's needDiscard/needSkip)."""
    if now_ms < half.due_ms:
        return CheckAction.WAIT
    if half.check_times >= max_check_times:
        return CheckAction.ROLLBACK
    return CheckAction.CHECK


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """Ask ``producer_group`` whether transaction ``transaction_id`` committed."""

    producer_group: str
    transaction_id: str
    message_id: str
    check_times: int  # checks so far, this one included
    half: StoredMessage  # the half record as now stored (the re-put copy)


Checker = Callable[[CheckRequest], None]


@dataclass(frozen=True, slots=True)
class CheckRound:
    """What one ``run_checks`` call did."""

    checked: list[CheckRequest]
    rolled_back: list[str]  # message ids given up after max_check_times
    failed: list[str]  # message ids whose checker raised a RocketMQError (retried later)
    half_progress: int


# --------------------------------------------------------------------------- the ledger


class HalfLedger:
    """Unresolved half records, finished offsets at or above ``half_progress``, and ``P``/``Q``.

    Invariant: every half offset in ``[half_progress, half_end)`` is either live or
    finished; ``op_end`` is one past the last op record known.
    """

    def __init__(self, half_progress: int, op_end: int) -> None:
        self.half_progress = half_progress
        self.half_end = half_progress
        self.op_end = op_end
        self._live: dict[int, LiveHalf] = {}
        self._by_id: dict[str, int] = {}
        self._finished: dict[int, int] = {}  # half offset -> lowest op offset naming it

    @property
    def op_progress(self) -> int:
        """``Q``: the lowest op offset still needed to rebuild the finished set."""
        return min(self._finished.values(), default=self.op_end)

    @property
    def live_count(self) -> int:
        return len(self._live)

    @property
    def finished_held(self) -> int:
        return len(self._finished)

    def live_by_id(self, message_id: str) -> LiveHalf | None:
        offset = self._by_id.get(message_id)
        return None if offset is None else self._live[offset]

    def live_at(self, half_offset: int) -> bool:
        return half_offset in self._live

    def is_finished(self, half_offset: int) -> bool:
        return half_offset < self.half_progress or half_offset in self._finished

    def add_live(self, half: LiveHalf) -> LiveHalf | None:
        """Register an unresolved record; returns the older live record of the same id, if any.

        The caller must retire the returned record (write its op record, then ``finish``).
        """
        self._live[half.queue_offset] = half
        self.half_end = max(self.half_end, half.queue_offset + 1)
        other = self._by_id.get(half.message_id)
        if other is not None and other > half.queue_offset:
            return half
        self._by_id[half.message_id] = half.queue_offset
        return None if other is None else self._live[other]

    def finish(self, half_offset: int, op_offset: int) -> None:
        """Record that op record ``op_offset`` finished half record ``half_offset``."""
        half = self._live.pop(half_offset, None)
        if half is not None and self._by_id.get(half.message_id) == half_offset:
            del self._by_id[half.message_id]
        self.op_end = max(self.op_end, op_offset + 1)
        if half_offset >= self.half_progress:
            known = self._finished.get(half_offset, op_offset)
            self._finished[half_offset] = min(known, op_offset)

    def advance(self) -> bool:
        """Move ``half_progress`` over finished records; True if it moved.

        It stops at the first live record, and at a *gap*: an offset below ``half_end``
        the ledger knows nothing of (a half whose put failed after it was appended, or a
        unit recovery could not read). :meth:`gap` names it; the service reads that
        record back from the store and registers it (``add_live``, ``finish`` or
        ``skip``), then advances again. A gap never fails a request.
        """
        start = self.half_progress
        while self.half_progress < self.half_end and self.half_progress in self._finished:
            del self._finished[self.half_progress]
            self.half_progress += 1
        return self.half_progress != start

    def gap(self) -> int | None:
        """The offset ``advance`` stopped at that is neither live nor finished, if any."""
        offset = self.half_progress
        if offset < self.half_end and offset not in self._live and offset not in self._finished:
            return offset
        return None

    def skip(self, half_offset: int) -> None:
        """Mark a half record that cannot be read as finished, with no op record."""
        if half_offset >= self.half_progress and half_offset not in self._live:
            self._finished.setdefault(half_offset, self.op_end)

    def due(self, now_ms: int) -> list[LiveHalf]:
        """Live records due for a check at ``now_ms``, oldest first."""
        return sorted(
            (h for h in self._live.values() if h.due_ms <= now_ms), key=lambda h: h.queue_offset
        )


# --------------------------------------------------------------------------- recovery


def read_queue(
    store: MessageStore, topic: str, queue_id: int, start: int, end: int
) -> Iterator[StoredMessage]:
    """Messages of one queue with offsets in ``[start, end)``, in order."""
    offset = start
    while offset < end:
        got = store.get_messages(QueueRead(topic, queue_id, offset, _READ_BATCH))
        for msg in got.messages:
            if msg.queue_offset < end:
                yield msg
        if got.next_offset <= offset:
            return
        offset = got.next_offset


def _clamp(value: int | None, low: int, high: int, what: str) -> int:
    if value is None:
        return low
    if not low <= value <= high:
        log.warning("transaction %s %d outside [%d, %d]; clamped", what, value, low, high)
    return max(low, min(value, high))


def recover_ledger(
    store: MessageStore,
    half_progress: int | None,
    op_progress: int | None,
    check_timeout_ms: int,
) -> tuple[HalfLedger, list[int]]:
    """Rebuild the ledger from the half and op topics (the store must be open).

    Returns the ledger and the half offsets the caller must retire with op records:
    superseded copies and records too malformed to check. ``None`` progress means "from
    the start of the topic".
    """
    if not store.is_open:
        raise StoreClosedError("transaction state is recovered from an open store only")
    if not store.wait_dispatched():
        raise BusyError("dispatch is behind; transaction state cannot be recovered yet")
    h_lo, h_hi = (
        store.min_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID),
        store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID),
    )
    o_lo, o_hi = (
        store.min_offset(TRANS_OP_HALF_TOPIC, OP_QUEUE_ID),
        store.max_offset(TRANS_OP_HALF_TOPIC, OP_QUEUE_ID),
    )
    first_op = _clamp(op_progress, o_lo, o_hi, "op progress")
    ledger = HalfLedger(_clamp(half_progress, h_lo, h_hi, "half progress"), first_op)
    for op in read_queue(store, TRANS_OP_HALF_TOPIC, OP_QUEUE_ID, first_op, o_hi):
        if op.tag != OP_TAG:
            continue
        try:
            for half_offset in parse_op_body(op.body):
                ledger.finish(half_offset, op.queue_offset)
        except InvalidArgumentError as exc:
            log.error("skipping op record %d: %s", op.queue_offset, exc)
    ledger.op_end = max(ledger.op_end, o_hi)
    retire: list[int] = []
    for msg in read_queue(store, TRANS_HALF_TOPIC, HALF_QUEUE_ID, ledger.half_progress, h_hi):
        retired = admit_half(ledger, msg, check_timeout_ms)
        if retired is not None:
            retire.append(retired)
    ledger.half_end = max(ledger.half_end, h_hi)
    return ledger, retire


def admit_half(ledger: HalfLedger, msg: StoredMessage, check_timeout_ms: int) -> int | None:
    """Register the half record ``msg`` read back from the store (recovery, or a gap).

    Returns the half offset the caller must retire with an op record, if any: the older
    of two live copies of one message, or a record too malformed to check.
    """
    if ledger.is_finished(msg.queue_offset) or ledger.live_at(msg.queue_offset):
        return None
    try:
        half = live_half_from(
            msg.properties, msg.queue_offset, msg.physical_offset, check_timeout_ms
        )
    except InvalidArgumentError as exc:
        log.error("half record %d cannot be checked, rolling it back: %s", msg.queue_offset, exc)
        ledger.half_end = max(ledger.half_end, msg.queue_offset + 1)
        return msg.queue_offset
    older = ledger.add_live(half)
    return None if older is None else older.queue_offset
