"""POP consumption (RocketMQ 5 SimpleConsumer / PushConsumer): receive, ack, invisible time.

``receive`` takes visible messages from a group's position in the queues of a topic
and in the group's retry topic ``%RETRY%{group}`` (shared by every topic the group
consumes, so a receive may return retries of another of its topics; ``PoppedMessage.topic``
names the original one), makes them invisible until ``now + invisible_ms`` and returns
each with a receipt handle (``receipt.py``) and its delivery attempt. ``ack`` ends a
delivery; ``change_invisible_duration`` moves its deadline and issues a new handle (the
old one becomes stale); ``nack`` and ``forward_to_dlq`` serve the PushConsumer paths.
Messages a filter rejects are skipped and count as consumed. A group new to a queue
starts at ``initial_offset`` (the broker passes the group's consume-from setting) and
that start is committed at once; ``reset_offset`` moves a group, live consumers included.
A message popped from a dead-letter (or any non-retry) topic is delivered, and acked,
under that topic; retry copies under their original one.

Expiry (``run_revive``): a delivery not acked by its deadline is revived as decided by
``policy.revive_decision``: a copy to the retry topic (non-FIFO), the same offset
visible again (FIFO), or a copy to ``%DLQ%{group}`` once retries are exhausted. FIFO
groups deliver a message group's next message only after the previous one is acked or
dead-lettered; other message groups in the queue flow (at most ``max_withheld_per_queue``
messages are held back per queue while scanning past busy groups).

Durability (details in ``state.py``): each checkpoint, ack, invisible change and
revive is a record in ``REVIVE_TOPIC`` written before the call returns; the consume
offset of each (group, topic, queue) and the revive replay start are committed to the
ConsumerOffsetManager as they advance (``close()`` persists it). ``open()`` replays the
log from the committed replay start, then revives whatever expired while the broker was
down. After a restart acked messages are not redelivered, un-acked ones come back when
their invisible time ends, attempt counts are kept, and receipt handles keep their
meaning: a handle current before the restart is still accepted; a stale one stays stale.
A handle becomes stale when superseded, acked, dead-lettered, or once ``run_revive`` has
processed its expiry (until then an ack after the deadline is still accepted).

Threads: every public method may be called from any thread; one lock serialises them
(store reads and appends happen under it). ``start()`` runs ``run_revive`` on a daemon
thread every ``revive_interval_ms``. ``retry_policy_for`` and ``is_fifo`` are called
under the lock and must not call back into the service.

>>> import tempfile
>>> from pathlib import Path
>>> from broker_core.config import StoreConfig
>>> from broker_core.message import Message
>>> d = Path(tempfile.mkdtemp())
>>> store = MessageStore(StoreConfig(store_dir=str(d), segment_size_bytes=1 << 20,
...                                  max_body_bytes=1024)); _ = store.open()
>>> pop = PopService(store, ConsumerOffsetManager(d / "offsets.json"), clock_ms=lambda: 0)
>>> pop.open()
>>> _ = store.put_messages([Message("orders", b"hi")]); _ = store.wait_dispatched()
>>> [got] = pop.receive("g", "orders", [0], max_count=8, invisible_ms=30_000)
>>> (got.message.body, got.delivery_attempt)
(b'hi', 1)
>>> pop.ack("g", "orders", got.receipt_handle); pop.consume_offset("g", "orders", 0)
1
>>> pop.close(); store.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.log import PopRecord, QueueKey, RecordKind, ReviveLog
from broker_core.broker.pop.model import PopConfig, PoppedMessage, check_int
from broker_core.broker.pop.receipt import ReceiptHandle, check_scope, decode_handle
from broker_core.broker.pop.revive import Reviver, resolution
from broker_core.broker.pop.scan import QueuePlan, QueueScanner
from broker_core.broker.pop.state import InFlight, PopState, QueueState
from broker_core.broker.retry import DeadLetter, RetryPolicy, next_delivery, retry_topic
from broker_core.broker.system_topics import REVIVE_TOPIC
from broker_core.clock import now_ms
from broker_core.errors import (
    StaleReceiptHandleError,
    StoreClosedError,
)
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.filters import MessageFilter
from broker_core.service_thread import ServiceThread, ThreadedService
from broker_core.store.message_store import MessageStore

log = logging.getLogger(__name__)

REVIVE_GROUP = "CID_RMQ_SYS_POP_REVIVE"  # its offset in REVIVE_TOPIC is the replay start


class PopService(ThreadedService):
    """In-flight POP deliveries of every group over one store (see the module docstring).
    Its thread (``start``, ``stop``, ``failure``) runs ``run_revive`` every
    ``revive_interval_ms``."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        config: PopConfig | None = None,
        *,
        clock_ms: Callable[[], int] = now_ms,
        retry_policy_for: Callable[[str], RetryPolicy] = lambda _group: RetryPolicy(),
        is_fifo: Callable[[str], bool] = lambda _group: False,
        initial_offset: Callable[[str, str, int], int] | None = None,
        group_of: Callable[[str], str] = lambda group: group,
    ) -> None:
        """``initial_offset(group, topic, queue id)`` is where a group that never committed
        in a queue starts (default: the queue's minimum); ``group_of`` names the group whose
        DLQ a state group's dead letters go to (itself unless it is a broadcast member)."""
        self.config = config or PopConfig()
        self._store = store
        self._offsets = offsets
        self._clock_ms = clock_ms
        self._policy_for = retry_policy_for
        self._is_fifo = is_fifo
        self._initial_offset = initial_offset or (lambda _g, t, qid: store.min_offset(t, qid))
        self._group_of = group_of
        self._lock = threading.Lock()
        self._log = ReviveLog(store)
        self._reset()
        self._open = False
        # A failed round (e.g. BusyError: the due entries wait a tick) is retried next tick.
        self.thread = ServiceThread(
            "pop-revive", self.run_revive, interval_ms=self.config.revive_interval_ms
        )

    def _reset(self) -> None:
        self._state = PopState()
        self._scanner = QueueScanner(self._store, self._state, self.config.max_withheld_per_queue)
        self._reviver = Reviver(
            self._log, self._state, self._scanner, self._policy_for, self._is_fifo, self._group_of
        )
        self._committed_start = 0

    # ---- lifecycle ---------------------------------------------------------------------

    def open(self) -> None:
        """Rebuild in-flight state from the revive log, then revive what expired meanwhile."""
        with self._lock:
            if self._open:
                return
            self._reset()
            self._log.open()
            start = self._offsets.query(REVIVE_GROUP, REVIVE_TOPIC, 0) or 0
            for revive_offset, record in self._log.replay(start):
                self._state.apply(revive_offset, record, self._replay_offset(record.key))
            self._state.finish_replay(self._log.next_offset)
            self._committed_start = start
            self._open = True
        self.run_revive()
        with self._lock:
            self._commit(self._state.queues.values())

    def close(self) -> None:
        """Stop the revive thread, commit progress and persist the offsets."""
        self.stop()
        with self._lock:
            if self._open:
                self._commit(self._state.queues.values())
                self._open = False
        self._offsets.persist()

    # ---- consuming ---------------------------------------------------------------------

    def receive(
        self,
        group: str,
        topic: str,
        queue_ids: Iterable[int],
        *,
        max_count: int,
        invisible_ms: int,
        filter: MessageFilter | None = None,
        retry: str = "first",
        fifo: bool | None = None,
        topics: Sequence[str] = (),
    ) -> list[PoppedMessage]:
        """Pop up to ``max_count`` visible messages; [] when none.

        ``retry`` places the group's retry topic ``first`` (the default), ``last`` (a
        PRIORITY topic: retries rank below every priority) or ``none`` (lite topics have
        no retry topic). ``fifo`` overrides the group's FIFO setting; ``topics`` are more
        topics read (queue 0 of each, after ``topic``'s queues: a lite consumer's topics).
        """
        validate_group_name(group)
        validate_topic_name(topic)
        qids = list(dict.fromkeys(check_int("queue id", q, 0, 2**31 - 1) for q in queue_ids))
        check_int("max_count", max_count, 1, self.config.max_receive_count)
        check_int("invisible_ms", invisible_ms, 1, self.config.max_invisible_ms)
        with self._lock:
            self._check_open()
            rtopic = retry_topic(group)
            fifo = self._is_fifo(group) if fifo is None else fifo
            retries: list[tuple[str, int, MessageFilter | None]] = (
                [(rtopic, q, None) for q in self._store.queue_ids(rtopic)]
                if retry != "none"
                else []
            )
            sources = retries if retry == "first" else []
            sources += [(topic, q, filter) for q in qids]
            sources += [(extra, 0, filter) for extra in topics]
            sources += retries if retry == "last" else []
            plans: list[QueuePlan] = []
            budget = max_count
            for src, qid, flt in sources:
                if budget == 0:
                    break
                qs = self._queue((group, src, qid))
                plan = self._scanner.plan(qs, budget, flt, self._log.next_offset, fifo=fifo)
                budget -= len(plan.picks)
                plans.append(plan)
            return self._deliver(plans, self._clock_ms(), invisible_ms)

    def _deliver(self, plans: list[QueuePlan], now: int, invisible_ms: int) -> list[PoppedMessage]:
        """Record the plans' checkpoints, then apply them; returns what was picked."""
        records: list[PopRecord] = []
        fresh: list[list[InFlight]] = []  # per plan, a delivery per pick (version set below)
        for plan in plans:
            entries = [
                InFlight(
                    plan.qs.key,
                    p.message.queue_offset,
                    -1,
                    p.anchor,
                    now,
                    invisible_ms,
                    p.attempt,
                    p.message_group,
                )
                for p in plan.picks
            ]
            fresh.append(entries)
            records += [entry.checkpoint() for entry in entries]
            records += [resolution(RecordKind.DROPPED, e, now) for e in plan.gone]
        versions = iter(self._log.append(records) if records else [])
        out: list[PoppedMessage] = []
        for plan, entries in zip(plans, fresh, strict=True):
            self._scanner.apply(plan)
            for pick, entry in zip(plan.picks, entries, strict=True):
                entry.version = next(versions)
                self._state.deliver(plan.qs, entry)
                out.append(
                    PoppedMessage(
                        pick.message,
                        pick.topic,
                        self._handle(entry),
                        pick.attempt,
                        entry.deadline_ms,
                    )
                )
            for entry in plan.gone:
                next(versions)
                self._state.resolve(plan.qs, entry)
        self._commit(plan.qs for plan in plans)
        return out

    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """End the delivery named by the handle; StaleReceiptHandleError if it is not current."""
        handle = decode_handle(receipt_handle)
        with self._lock:
            qs, entry = self._current(group, topic, handle)
            self._log.append([resolution(RecordKind.ACK, entry, self._clock_ms())])
            self._state.resolve(qs, entry)
            self._commit([qs])

    def change_invisible_duration(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make the message invisible for ``invisible_ms`` from now; returns the new handle."""
        check_int("invisible_ms", invisible_ms, 0, self.config.max_invisible_ms)
        handle = decode_handle(receipt_handle)
        with self._lock:
            qs, entry = self._current(group, topic, handle)
            return self._handle(self._extend(qs, entry, invisible_ms))

    def nack(
        self, group: str, topic: str, receipt_handle: str, delay_ms: int | None = None
    ) -> None:
        """Consumption failed: redeliver after ``delay_ms`` (default: the group's backoff).

        With the default, a delivery that has used up the group's retries goes to the
        DLQ at once. An explicit ``delay_ms`` only sets the invisible time.
        """
        if delay_ms is not None:
            check_int("delay_ms", delay_ms, 0, self.config.max_invisible_ms)
        handle = decode_handle(receipt_handle)
        with self._lock:
            qs, entry = self._current(group, topic, handle)
            now = self._clock_ms()
            if delay_ms is None:
                decision = next_delivery(self._policy_for(group), entry.attempt, now)
                if isinstance(decision, DeadLetter):
                    self._reviver.revive([(qs, entry)], now, force_dlq=True)
                    self._commit([qs])
                    return
                delay_ms = min(decision.delay_ms, self.config.max_invisible_ms)
            self._extend(qs, entry, delay_ms)

    def forward_to_dlq(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move the message to ``%DLQ%{group}`` now (the client gave up on it)."""
        handle = decode_handle(receipt_handle)
        with self._lock:
            qs, entry = self._current(group, topic, handle)
            self._reviver.revive([(qs, entry)], self._clock_ms(), force_dlq=True)
            self._commit([qs])

    def run_revive(self, now_ms: int | None = None) -> int:
        """Revive every delivery whose deadline is ``<= now_ms`` (default: the clock).

        Returns how many were revived. On a store error the due deliveries stay due.
        """
        with self._lock:
            self._check_open()
            now = self._clock_ms() if now_ms is None else now_ms
            total = 0
            while due := self._state.pop_due(now, self.config.revive_batch):
                try:
                    self._reviver.revive(due, now)
                except BaseException:
                    for _qs, entry in due:
                        self._state.requeue(entry)
                    raise
                self._commit(qs for qs, _entry in due)
                total += len(due)
            return total

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Move ``group`` to ``offset`` in the queue, for live consumers too.

        Deliveries in flight there end (their handles become stale); the next receive
        reads from ``offset``. A RESET record makes it survive a restart.
        """
        validate_group_name(group)
        check_int("offset", offset, 0, 2**63 - 1)
        with self._lock:
            self._check_open()
            record = PopRecord(
                RecordKind.RESET, group, topic, queue_id, offset, time_ms=self._clock_ms()
            )
            self._log.append([record])
            qs = self._state.reset((group, topic, queue_id), offset)
            self._offsets.commit(group, topic, queue_id, offset)
            qs.committed = offset
            self._commit([])

    # ---- inspection --------------------------------------------------------------------

    def consume_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Lowest offset the group has not finished in the queue (what gets committed)."""
        with self._lock:
            qs = self._state.queues.get((group, topic, queue_id))
            if qs is not None:
                return qs.consume_offset()
            committed = self._offsets.query(group, topic, queue_id)
            return self._initial_offset(group, topic, queue_id) if committed is None else committed

    def inflight_count(self) -> int:
        """Deliveries not yet acked or resolved, across all groups."""
        with self._lock:
            return self._state.inflight_count()

    def progress_of(self, group: str) -> dict[tuple[str, int], tuple[int, int, int]]:
        """(topic, queue id) → (consume offset, scan frontier, deliveries not yet acked) of
        every queue ``group`` has popped from (for metrics)."""
        with self._lock:
            return {
                (topic, qid): (qs.consume_offset(), qs.popped_to, len(qs.inflight))
                for (g, topic, qid), qs in self._state.queues.items()
                if g == group
            }

    # ---- helpers (called with the lock held) --------------------------------------------

    def _check_open(self) -> None:
        if not self._open:
            raise StoreClosedError("pop service is not open")

    def _replay_offset(self, key: QueueKey) -> Callable[[], int]:
        """Where a replayed queue starts: committed, else the minimum (records of a queue
        whose first commit was lost in a crash must not be skipped)."""

        def start() -> int:
            committed = self._offsets.query(*key)
            return committed if committed is not None else self._store.min_offset(*key[1:])

        return start

    def _queue(self, key: QueueKey) -> QueueState:
        """The state of ``key``; a new one starts at the committed offset, else at the
        group's initial offset, which is committed at once so that it holds."""
        qs = self._state.queues.get(key)
        if qs is not None:
            return qs
        committed = self._offsets.query(*key)
        start = self._initial_offset(*key) if committed is None else committed
        qs = self._state.queue(key, lambda: start)
        if committed is None:  # durable when a replay (which assumes the minimum) would differ
            self._offsets.commit(*key, start, durable=start != self._store.min_offset(*key[1:]))
        return qs

    def _current(
        self, group: str, topic: str, handle: ReceiptHandle
    ) -> tuple[QueueState, InFlight]:
        """The in-flight delivery ``handle`` names; StaleReceiptHandleError if not current."""
        self._check_open()
        validate_group_name(group)
        check_scope(handle, broker_name=self.config.broker_name, topics=(topic, retry_topic(group)))
        qs = self._state.queues.get((group, handle.topic, handle.queue_id))
        entry = qs.inflight.get(handle.queue_offset) if qs else None
        if qs is None or entry is None or entry.expired:
            raise StaleReceiptHandleError(
                f"{handle.topic}:{handle.queue_id} offset {handle.queue_offset} is not in flight"
            )
        if entry.version != handle.checkpoint_offset:
            raise StaleReceiptHandleError("receipt handle was superseded by a newer one")
        return qs, entry

    def _extend(self, qs: QueueState, entry: InFlight, invisible_ms: int) -> InFlight:
        """A new delivery version of ``entry``, invisible for ``invisible_ms`` from now."""
        new = InFlight(
            qs.key,
            entry.offset,
            -1,
            entry.anchor,
            self._clock_ms(),
            invisible_ms,
            entry.attempt,
            entry.message_group,
        )
        (new.version,) = self._log.append([new.checkpoint()])
        self._state.deliver(qs, new)
        return new

    def _handle(self, entry: InFlight) -> str:
        _group, topic, qid = entry.key
        return ReceiptHandle(
            topic,
            qid,
            entry.offset,
            entry.version,
            entry.pop_time_ms,
            entry.invisible_ms,
            self.config.broker_name,
        ).encode()

    def _commit(self, queues: Iterable[QueueState]) -> None:
        """Commit consume offsets that advanced, then the replay start (in that order)."""
        for qs in queues:  # a queue listed twice commits once: ``committed`` is updated
            offset = qs.consume_offset()
            if offset != qs.committed:
                self._offsets.commit(*qs.key, offset)
                qs.committed = offset
        start = self._state.replay_start(self._log.next_offset)
        if start != self._committed_start:
            self._offsets.commit(REVIVE_GROUP, REVIVE_TOPIC, 0, start)
            self._committed_start = start
