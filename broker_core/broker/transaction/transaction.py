"""Transactional messages: half messages, commit/rollback, and check-back of forgotten ones.

Flow (RocketMQ's two-phase send)::

    prepare(msg) ─▶ half record in RMQ_SYS_TRANS_HALF_TOPIC:0 (invisible to consumers)
    end(COMMIT)  ─▶ the real message to REAL_TOPIC:REAL_QID, then an op record (tag "d")
    end(ROLLBACK)─▶ an op record only
    run_checks   ─▶ a half unresolved for check_timeout_ms is re-put with
                    TRANSACTION_CHECK_TIMES + 1 (plus an op record for the old copy) and the
                    checker asks its producer; after max_check_times it is rolled back.

Each ``end`` is one ``put_messages`` batch ``[real message, op record]`` and each re-put is
``[copy, op record of the original]``, so a torn tail can only drop the op record. After
such a crash the half looks unresolved: a re-put leaves two copies (recovery retires the
older), a commit may be delivered a second time if the producer confirms it again — the
at-least-once window RocketMQ has too, a few hundred bytes wide.

Durability and restart: all state is derived from the half and op topics plus the check
progress offsets kept in the ConsumerOffsetManager (see ``check.py``). ``open()``
rebuilds it from the store once the store is open and recovered; unresolved halves are
checked again and can still be ended; finished ones never come back. ``stop()`` persists
the progress offsets; an older persisted progress only makes the next recovery read
more. Messages become durable as the store's flush mode says; process crashes lose
nothing (mmap writes).

Threads: ``prepare``, ``end``, ``run_checks`` and ``stats`` may be called from any thread;
one lock serialises every write to the half and op topics and the ledger. The checker
runs on the thread of ``run_checks`` (the check thread after ``start()``) without the lock
held, so it may call ``end`` directly. ``start``/``stop`` belong to the owner.

Delayed or timed transactional messages keep their delay properties on commit, but the
committed message is put straight into its real topic: routing it through the schedule
or timer service is not done here yet.

>>> import tempfile
>>> from pathlib import Path
>>> from broker_core.broker.offsets import ConsumerOffsetManager
>>> from broker_core.config import StoreConfig
>>> root = Path(tempfile.mkdtemp())
>>> store = MessageStore(StoreConfig(store_dir=str(root), segment_size_bytes=1 << 20,
...                                  max_body_bytes=1024))
>>> _ = store.open()
>>> tx = TransactionService(store, ConsumerOffsetManager(root / "offsets.json"),
...                         checker=lambda request: None)
>>> tx.open()  # rebuilds the ledger from the half and op topics
>>> half = tx.prepare(Message("orders", b"paid"), "order-producers", "tx-1")
>>> tx.end(half.message_id, "tx-1", Resolution.COMMIT, from_check=False).delivered.topic
'orders'
>>> tx.stop(); store.close()
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.system_topics import (
    TRANS_CHECK_GROUP,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from broker_core.broker.transaction.check import (
    CheckAction,
    Checker,
    CheckRequest,
    CheckRound,
    HalfLedger,
    LiveHalf,
    admit_half,
    decide_check,
    live_half_from,
    recover_ledger,
)
from broker_core.broker.transaction.halves import half_at, not_at, real_topic
from broker_core.broker.transaction.records import (
    HALF_QUEUE_ID,
    OP_QUEUE_ID,
    half_message,
    op_message,
    real_message,
    recheck_message,
)
from broker_core.clock import now_ms
from broker_core.errors import (
    CorruptionError,
    InvalidArgumentError,
    InvalidTransactionIdError,
    MessageNotFoundError,
    OffsetOutOfRangeError,
    RocketMQError,
    StoreClosedError,
)
from broker_core.message import (
    PROPERTY_UNIQ_KEY,
    Message,
)
from broker_core.service_thread import ServiceThread, describe
from broker_core.store.message_store import MessageStore, PutResult
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

_RECENT_LIMIT = 10_000  # ended ids remembered for a clearer error on a second end


class Resolution(StrEnum):
    COMMIT = "commit"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """Where the half went; ``message_id`` and ``transaction_id`` are what ``end`` needs."""

    message_id: str
    transaction_id: str
    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC:0
    physical_offset: int  # commitlog offset of the half record


@dataclass(frozen=True, slots=True)
class EndResult:
    """How a half was ended; ``delivered`` is where the committed message went."""

    message_id: str
    resolution: Resolution
    from_check: bool
    delivered: PutResult | None  # None for ROLLBACK


@dataclass(frozen=True, slots=True)
class TransactionStats:
    """Sizes and progress, for admin tools and the memory-bound tests."""

    unresolved: int
    finished_held: int  # finished half offsets at or above half_progress kept in memory
    half_progress: int
    op_progress: int


# --------------------------------------------------------------------------- the service


class TransactionService:
    """Prepare, end and check back transactional messages over one MessageStore."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        checker: Checker,
        *,
        check_timeout_ms: int = 6_000,
        max_check_times: int = 15,
        check_interval_ms: int = 1_000,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._checker = checker
        self._check_timeout_ms = check_timeout_ms
        self._max_check_times = max_check_times
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, Resolution] = OrderedDict()
        self._committed_progress = (-1, -1)
        # A failed round (store busy or closing, or a bug) is logged; the next one retries.
        self.thread = ServiceThread("transaction-check", self._round, interval_ms=check_interval_ms)
        self._ledger_or_none: HalfLedger | None = None

    def open(self) -> None:
        """Rebuild the ledger from the (open, recovered) store; idempotent.

        Must run after ``MessageStore.open()``: before it the consume queues of the half
        and op topics are not loaded and every transaction would look finished.
        """
        with self._lock:
            if self._ledger_or_none is not None:
                return
        half_p = self._offsets.query(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID)
        op_p = self._offsets.query(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, OP_QUEUE_ID)
        ledger, retire = recover_ledger(self._store, half_p, op_p, self._check_timeout_ms)
        with self._lock:
            self._ledger_or_none = ledger
            self._retire(retire)
            self._commit_progress()
        log.info(
            "transactions recovered: %d unresolved, %d retired, half progress %d",
            ledger.live_count,
            len(retire),
            ledger.half_progress,
        )

    @property
    def _ledger(self) -> HalfLedger:
        if self._ledger_or_none is None:
            raise StoreClosedError("transaction service is not open (call open() after the store)")
        return self._ledger_or_none

    def _retire(self, half_offsets: list[int]) -> None:
        """Write op records finishing ``half_offsets`` (superseded or unreadable halves)."""
        now_ms = self._clock_ms()
        for half_offset in half_offsets:
            op = self._store.put_message(op_message(half_offset, now_ms))
            self._ledger.finish(half_offset, op.queue_offset)

    # ---- producer side ------------------------------------------------------------------

    def prepare(self, msg: Message, producer_group: str, transaction_id: str) -> PrepareResult:
        """Store ``msg`` as a half message; idempotent for a repeated (message id, tx id)."""
        half_msg = half_message(msg, producer_group, transaction_id, self._clock_ms())
        message_id = half_msg.properties[PROPERTY_UNIQ_KEY]
        with self._lock:
            existing = self._ledger.live_by_id(message_id)
            if existing is None:
                put = self._store.put_message(half_msg)
                existing = live_half_from(
                    half_msg.properties,
                    put.queue_offset,
                    put.physical_offset,
                    self._check_timeout_ms,
                )
                self._ledger.add_live(existing)
                self._recent.pop(message_id, None)
            elif existing.transaction_id != transaction_id:
                raise InvalidArgumentError(
                    f"message {message_id} is already prepared in transaction "
                    f"{existing.transaction_id}, not {transaction_id}"
                )
        return PrepareResult(
            message_id, transaction_id, existing.queue_offset, existing.physical_offset
        )

    def end(
        self,
        message_id: str,
        transaction_id: str,
        resolution: Resolution,
        *,
        from_check: bool,
        topic: str | None = None,
    ) -> EndResult:
        """Commit or roll back the unresolved half ``message_id``.

        Raises MessageNotFoundError when no unresolved half has that id (unknown, or
        already ended — a second COMMIT never delivers twice) or, with ``topic`` given,
        when the half's real topic is another (the ACL allowed the caller ``topic`` only;
        the message does not say which topic it is in), and InvalidArgumentError when
        ``transaction_id`` does not match the half's.
        """
        try:
            resolution = Resolution(resolution)
        except ValueError:
            raise InvalidArgumentError(f"unknown resolution {resolution!r}") from None
        with self._lock:
            half = self._live(message_id)
            needs_record = topic is not None or resolution is Resolution.COMMIT
            stored = self._store.read_message(half.physical_offset) if needs_record else None
            if topic is not None and stored is not None and real_topic(stored) != topic:
                raise MessageNotFoundError(
                    f"no unresolved half message {message_id} in topic {topic}"
                )
            if half.transaction_id != transaction_id:
                raise InvalidTransactionIdError(
                    f"message {message_id} belongs to transaction {half.transaction_id}, "
                    f"not {transaction_id}"
                )
            batch = [op_message(half.queue_offset, self._clock_ms())]
            if stored is not None and resolution is Resolution.COMMIT:
                batch.insert(0, real_message(stored))
            puts = self._store.put_messages(batch)
            self._ledger.finish(half.queue_offset, puts[-1].queue_offset)
            self._remember(message_id, resolution)
            self._commit_progress()
        log.info(
            "transaction %s of %s: %s (%s)",
            transaction_id,
            message_id,
            resolution,
            "answer to check" if from_check else "producer",
        )
        delivered = puts[0] if resolution is Resolution.COMMIT else None
        return EndResult(message_id, resolution, from_check, delivered)

    def half_topic(self, physical_offset: int, message_id: str) -> str:
        """The real topic of the unresolved half ``message_id``, which the half record at
        commitlog ``physical_offset`` (the original or a check-back copy) must name too.

        What a 4.x END_TRANSACTION is authorised against. MessageNotFoundError as ``end``
        raises it when no unresolved half has that id, and when the offset holds no half
        record of it (``halves.half_at``) or one of another topic (a forged record).
        """
        with self._lock:
            topic = real_topic(self._store.read_message(self._live(message_id).physical_offset))
        if real_topic(half_at(self._store, physical_offset, message_id)) != topic:
            raise not_at(message_id, physical_offset)
        return topic

    def _live(self, message_id: str) -> LiveHalf:
        """The unresolved half ``message_id``; MessageNotFoundError if none. Caller holds
        the lock."""
        half = self._ledger.live_by_id(message_id)
        if half is None and self._fill_gaps():  # maybe a half the ledger has not seen
            half = self._ledger.live_by_id(message_id)
        if half is None:
            raise self._not_found(message_id)
        return half

    def _not_found(self, message_id: str) -> MessageNotFoundError:
        ended = self._recent.get(message_id)
        if ended is Resolution.COMMIT:
            return MessageNotFoundError(f"half message {message_id} was already committed")
        if ended is Resolution.ROLLBACK:
            return MessageNotFoundError(f"half message {message_id} was already rolled back")
        return MessageNotFoundError(
            f"no unresolved half message {message_id} (unknown, or ended earlier)"
        )

    def _remember(self, message_id: str, resolution: Resolution) -> None:
        self._recent[message_id] = resolution
        self._recent.move_to_end(message_id)
        while len(self._recent) > _RECENT_LIMIT:
            self._recent.popitem(last=False)

    def _commit_progress(self) -> None:
        """Advance P over finished halves and hand (P, Q) to the offset manager, P first."""
        ledger = self._ledger
        ledger.advance()
        if self._fill_gaps():
            ledger.advance()
        progress = (ledger.half_progress, ledger.op_progress)
        if progress == self._committed_progress:
            return
        self._offsets.commit(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, progress[0])
        self._offsets.commit(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, OP_QUEUE_ID, progress[1])
        self._committed_progress = progress

    def _fill_gaps(self, limit: int = 1024) -> bool:
        """Read back half records the ledger missed (see ``HalfLedger.advance``).

        Each gap offset is looked up in the half topic: a record found is registered
        (live, or retired when superseded or malformed); a unit that exists but cannot be
        read is skipped with an error logged; a record not dispatched yet stays a gap and
        is looked at again later. Returns True if any gap was filled. Caller holds the lock.
        """
        filled = False
        ledger = self._ledger
        for _ in range(limit):
            offset = ledger.gap()
            if offset is None or offset >= self._store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID):
                break
            try:
                got = self._store.get_messages(
                    QueueRead(TRANS_HALF_TOPIC, HALF_QUEUE_ID, offset, 1)
                )
                found = [m for m in got.messages if m.queue_offset == offset]
            except (OffsetOutOfRangeError, CorruptionError) as exc:  # retention, bit rot
                log.error("transaction ledger: half record %d: %s", offset, exc)
                found = []
            if found:
                log.warning(
                    "transaction ledger: half record %d was not registered; "
                    "read it back from the store",
                    offset,
                )
                retired = admit_half(ledger, found[0], self._check_timeout_ms)
                self._retire([] if retired is None else [retired])
            else:
                log.error("transaction ledger: half record %d cannot be read; skipped", offset)
                ledger.skip(offset)
            ledger.advance()
            filled = True
        return filled

    # ---- check-back ---------------------------------------------------------------------

    def run_checks(self, now_ms: int) -> CheckRound:
        """One check round at broker time ``now_ms``; calls the checker without the lock.

        A store error (busy, closed) ends the round early: the checks already re-put are
        still sent, then the error is raised; the rest wait for the next round.
        """
        requests: list[CheckRequest] = []
        rolled_back: list[str] = []
        error: RocketMQError | None = None
        with self._lock:
            for half in self._ledger.due(now_ms):
                try:
                    action = decide_check(half, now_ms, self._max_check_times)
                    if action is CheckAction.CHECK:
                        requests.append(self._recheck(half, now_ms))
                    elif action is CheckAction.ROLLBACK:
                        self._give_up(half, now_ms)
                        rolled_back.append(half.message_id)
                except RocketMQError as exc:
                    error = exc
                    break
            self._commit_progress()
            progress = self._ledger.half_progress
        self._offsets.persist()
        failed = [r.message_id for r in requests if not self._ask(r)]
        if error is not None:
            raise error
        return CheckRound(requests, rolled_back, failed, progress)

    def _ask(self, request: CheckRequest) -> bool:
        try:
            self._checker(request)
        except RocketMQError as exc:  # e.g. no producer of the group online: asked again later
            log.warning("check-back of %s failed: %s", request.message_id, exc)
            return False
        except Exception:  # a checker's bug must not stop checking: asked again later
            log.exception("check-back of %s raised", request.message_id)
            return False
        return True

    def _recheck(self, half: LiveHalf, now_ms: int) -> CheckRequest:
        stored = self._store.read_message(half.physical_offset)
        copy = recheck_message(stored, now_ms)
        copy_put, op_put = self._store.put_messages([copy, op_message(half.queue_offset, now_ms)])
        self._ledger.finish(half.queue_offset, op_put.queue_offset)
        live = live_half_from(
            copy.properties, copy_put.queue_offset, copy_put.physical_offset, self._check_timeout_ms
        )
        self._ledger.add_live(live)
        now_stored = self._store.read_message(copy_put.physical_offset)
        return CheckRequest(
            live.producer_group, live.transaction_id, live.message_id, live.check_times, now_stored
        )

    def _give_up(self, half: LiveHalf, now_ms: int) -> None:
        op = self._store.put_message(op_message(half.queue_offset, now_ms))
        self._ledger.finish(half.queue_offset, op.queue_offset)
        self._remember(half.message_id, Resolution.ROLLBACK)
        log.warning(
            "transaction %s of %s (producer group %s) unresolved after %d checks; rolled back",
            half.transaction_id,
            half.message_id,
            half.producer_group,
            half.check_times,
        )

    def stats(self) -> TransactionStats:
        with self._lock:
            ledger = self._ledger
            return TransactionStats(
                ledger.live_count, ledger.finished_held, ledger.half_progress, ledger.op_progress
            )

    # ---- the check thread ---------------------------------------------------------------

    def start(self) -> None:
        """Run a check round every ``check_interval_ms`` on a daemon thread (opens first)."""
        if self.thread.is_alive():
            return
        self.open()
        self.thread.start()

    def _round(self) -> None:
        self.run_checks(self._clock_ms())

    @property
    def failure(self) -> BaseException | None:
        """What ended the check thread, or None."""
        return self.thread.failure

    @property
    def last_round_error(self) -> str | None:
        """The last check round's error while no round has succeeded since, or None."""
        error = self.thread.last_error
        return None if error is None else describe(error)

    def stop(self) -> None:
        """Stop the check thread (if started) and persist the check progress."""
        self.thread.stop()
        self._offsets.persist()
