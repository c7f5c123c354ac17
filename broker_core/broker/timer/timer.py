"""Arbitrary delivery times: a persistent timing wheel over a timer log (RocketMQ 5 style).

Send path: :func:`to_timer_message` rewrites a message due at ``deliver_at_ms`` (or at its
``__STARTDELIVERTIME`` property) to ``TIMER_TOPIC`` queue 0 with ``REAL_TOPIC`` /
``REAL_QID``, ``TIMER_ID`` (= its ``UNIQ_KEY``, which is assigned if missing — the one
impure step) and ``TIMER_DELIVER_MS``. The broker stores that message in the commitlog.

:class:`TimerService` then, in each ``run_once(now_ms)``:

1. *ingests* new ``TIMER_TOPIC`` messages from its ingest offset: each becomes a
   schedule record in the timer log (``log.py``), chained into the wheel slot of its
   slot time ``ceil(deliver_ms / precision_ms) × precision_ms`` (``wheel.py``). A
   timer beyond the wheel's horizon goes to the farthest slot and is *rolled* (given a
   new record closer to its time) each time that slot fires. A timer whose slot time
   has already been fired is delivered at once.
2. *fires* every slot time from the read time up to ``now_ms``: reads that one slot,
   walks only its chain, drops recalled and duplicate records, rolls records that are
   not yet due, and re-puts the real messages in due order (topic and queue from
   ``REAL_*``, the timer properties removed, ``UNIQ_KEY`` and user properties kept).
   A timer is never delivered before its time and at most ``precision_ms`` late.

:meth:`TimerService.recall` appends a *cancel* record for the timer into the slot chain
where its schedule record is (or will be), so firing sees both and delivers nothing.
Recall is durable on return (log fsynced, wheel flushed). It returns False — rather
than raising — when the timer is unknown or its slot has already fired (delivered, or
being delivered); recalling an already recalled pending timer returns True again.

Durability and recovery: the checkpoint ``timercheck.json`` (:func:`write_json_atomic`)
holds the ingest offset and the read time; it is written at the end of a ``run_once``
that changed anything, whenever the read time runs ``min(checkpoint_interval_ms, half a
turn)`` ahead of the last one, and on ``close`` — always after the records it covers are
fsynced and the deliveries it covers were accepted by the store. The wheel's horizon is
measured from the checkpointed read time, so no link made before a crash can overwrite a
chain that a replay from the checkpoint still needs. After a crash the service
re-ingests from the checkpointed offset (duplicate records are dropped at firing, by
commitlog offset) and re-fires from the checkpointed read time, so timers due during
downtime are delivered by the first ``run_once`` and a delivery just before a crash may
repeat: at-least-once, nothing lost. Stop the service before closing the store.
Changing ``precision_ms`` or ``wheel_slots`` of an existing directory is a ConfigError.
Not implemented: retention of the timer log, and rebuilding the directory
from the commitlog if it is lost (recall records live only in the timer log).

Threads: ``run_once``, ``recall``, ``schedule`` and ``close`` may be called from any
thread; one lock serialises them. ``start()`` runs a daemon thread that fires each slot
time as the clock reaches it; the store's dispatch thread only sets a wake-up event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker.system_topics import TIMER_TOPIC
from broker_core.broker.timer.delivery import delivery_thread
from broker_core.broker.timer.log import FLAG_CANCEL, TimerLog, TimerRecord
from broker_core.broker.timer.policy import (
    TIMER_PROPERTIES,
    deliver_time_of,
    link_target_ms,
    plan_firing,
    to_timer_message,
)
from broker_core.broker.timer.schedule import Fired, restore_real_message
from broker_core.broker.timer.wheel import TimingWheel
from broker_core.clock import now_ms
from broker_core.errors import (
    ConfigError,
    CorruptionError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
    StoreClosedError,
)
from broker_core.message import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_ID,
    Message,
    StoredMessage,
)
from broker_core.service_thread import ThreadedService
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.message_store import MessageStore, PutResult
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "timercheck.json"
LOG_FILE = "timerlog"
WHEEL_FILE = "timerwheel"
WEEK_MS = 7 * 86_400_000

# --------------------------------------------------------------------------- service


@dataclass(slots=True)
class TimerStats:
    """Counters since the service was created (not persisted)."""

    ingested: int = 0
    delivered: int = 0
    rolled: int = 0
    recalled: int = 0
    slots_fired: int = 0
    records_visited: int = 0
    dropped: int = 0  # timer messages that could not be delivered (logged)


class TimerService(ThreadedService):
    """Delivers ``TIMER_TOPIC`` messages at their delivery time; see the module docstring."""

    def __init__(
        self,
        store: MessageStore,
        directory: Path,
        *,
        precision_ms: int = 1_000,
        wheel_slots: int | None = None,
        clock_ms: Callable[[], int] = now_ms,
        batch_size: int = 256,
        checkpoint_interval_ms: int = 10_000,
        max_idle_wait_ms: int = 1_000,
    ) -> None:
        slots = WEEK_MS // precision_ms if wheel_slots is None else wheel_slots
        if min(precision_ms, batch_size, checkpoint_interval_ms, max_idle_wait_ms) < 1:
            raise ConfigError("timer: precision, batch, checkpoint and idle values must be ≥ 1")
        if slots < 2:
            raise ConfigError(f"timer: wheel_slots must be ≥ 2, got {slots}")
        self._store = store
        self._dir = directory
        self.precision_ms = precision_ms
        self.wheel_slots = slots
        self._clock_ms = clock_ms
        self._batch_size = batch_size
        self._max_idle_wait_ms = max_idle_wait_ms
        self._lock = threading.Lock()
        self.stats = TimerStats()
        self._ingest_offset, self._read_time = self._load_checkpoint()
        self._saved_read_time = self._read_time
        self._save_every_ms = max(1, min(checkpoint_interval_ms, (slots - 1) * precision_ms // 2))
        self._dirty = False
        self._log = TimerLog(directory / LOG_FILE)
        self._wheel = TimingWheel(directory / WHEEL_FILE, precision_ms, slots)
        self._closed = False
        self.fired: Fired = lambda _how, _puts: None  # message trace's Timer records
        self.thread = delivery_thread(
            "timer-wheel",
            store,
            TIMER_TOPIC,
            self.run_once,
            max_idle_wait_ms=max_idle_wait_ms,
            next_wait_ms=self._wait_ms,
        )

    # ---- checkpoint -------------------------------------------------------------------

    def _load_checkpoint(self) -> tuple[int, int]:
        path = self._dir / CHECKPOINT_FILE
        loaded = read_json_atomic(path)
        if loaded.source == "backup":
            log.warning("timer checkpoint: %s, using the backup copy", loaded.problem)
        if loaded.data is None:
            now = self._clock_ms()
            return 0, now - now % self.precision_ms
        try:
            data = loaded.data
            geometry = (int(data["precision_ms"]), int(data["wheel_slots"]))
            offset, read_time = int(data["ingest_offset"]), int(data["read_time_ms"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path} is malformed: {exc}") from exc
        if geometry != (self.precision_ms, self.wheel_slots):
            raise ConfigError(
                f"{path} was written with precision_ms, wheel_slots = {geometry}; "
                f"now {(self.precision_ms, self.wheel_slots)}: keep the old values"
            )
        return offset, read_time

    def _horizon_ms(self) -> int:
        """The farthest slot time that may be linked: one turn from the *durable* read time.

        Measuring from the checkpointed read time (not the live one) means that after a
        crash, replaying from the checkpoint never links into a slot that holds a live
        chain of the next turn.
        """
        return self._saved_read_time + (self.wheel_slots - 1) * self.precision_ms

    def _keep_horizon(self) -> None:
        """Checkpoint when the live read time ran far enough ahead of the durable one."""
        if self._read_time - self._saved_read_time >= self._save_every_ms:
            self._save_checkpoint()

    def _save_checkpoint(self) -> None:
        write_json_atomic(
            self._dir / CHECKPOINT_FILE,
            {
                "ingest_offset": self._ingest_offset,
                "read_time_ms": self._read_time,
                "precision_ms": self.precision_ms,
                "wheel_slots": self.wheel_slots,
            },
        )
        self._saved_read_time = self._read_time
        self._dirty = False

    # ---- API --------------------------------------------------------------------------

    @property
    def read_time_ms(self) -> int:
        """The next slot time to fire; everything in earlier slots has been delivered."""
        with self._lock:
            return self._read_time

    def to_timer_message(self, msg: Message, deliver_at_ms: int | None = None) -> Message:
        """See :func:`to_timer_message`."""
        return to_timer_message(msg, deliver_at_ms)

    def schedule(self, msg: Message, deliver_at_ms: int | None = None) -> PutResult:
        """Store ``msg`` as a timer; ``PutResult.message_id`` is its timer id for recall."""
        return self._store.put_message(to_timer_message(msg, deliver_at_ms))

    def run_once(self, now_ms: int | None = None) -> int:
        """Ingest new timers and fire every slot due at ``now_ms``; returns messages delivered."""
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                raise StoreClosedError("timer service is closed")
            self._keep_horizon()
            delivered = self._ingest()
            while self._read_time <= now:
                self._keep_horizon()
                delivered += self._fire(self._read_time)
                self._read_time += self.precision_ms
            if self._dirty or self._read_time - self._saved_read_time >= self._save_every_ms:
                self._save_checkpoint()
            return delivered

    def recall(self, timer_id: str, *, topic: str | None = None) -> bool:
        """Cancel a pending timer so it is never delivered; durable on return.

        False when no timer has this id or its slot has already fired, and, with
        ``topic`` (the one the caller is authorised on), when the timer is of another
        topic. Waits for the store to dispatch what was appended, so a timer just stored
        can be recalled.
        """
        self._store.wait_dispatched()
        stored = self._find_timer(timer_id)
        if stored is None:
            return False
        if topic is not None and stored.properties.get(PROPERTY_REAL_TOPIC) != topic:
            return False
        try:
            deliver_ms = deliver_time_of(stored.properties)
        except InvalidArgumentError:
            return False
        cancel = TimerRecord(deliver_ms, stored.physical_offset, stored.stored_size, FLAG_CANCEL)
        with self._lock:
            if self._closed:
                raise StoreClosedError("timer service is closed")
            target = link_target_ms(
                deliver_ms, self._read_time, self._horizon_ms(), self.precision_ms
            )
            if target is None:
                return False
            chain = self._wheel.walk(self._log, target)
            if not any(
                r.flags == FLAG_CANCEL and r.phys_offset == cancel.phys_offset for _, r in chain
            ):
                self._wheel.link(self._log, [(target, cancel)])
            self.stats.recalled += 1
            return True

    def _find_timer(self, timer_id: str) -> StoredMessage | None:
        for msg in self._store.query_by_key(timer_id, topic=TIMER_TOPIC, max_results=4):
            if msg.topic == TIMER_TOPIC and msg.properties.get(PROPERTY_TIMER_ID) == timer_id:
                return msg
        return None

    # ---- ingest -----------------------------------------------------------------------

    def _ingest(self) -> int:
        """Chain every new TIMER_TOPIC message into the wheel; deliver those already due."""
        delivered = 0
        while True:
            try:
                got = self._store.get_messages(
                    QueueRead(TIMER_TOPIC, 0, self._ingest_offset, self._batch_size)
                )
            except OffsetOutOfRangeError as exc:
                moved = exc.min_offset if self._ingest_offset < exc.min_offset else exc.max_offset
                log.warning(
                    "timer ingest offset %d out of range, moving to %d", self._ingest_offset, moved
                )
                self._ingest_offset, self._dirty = moved, True
                continue
            if not got.messages and got.next_offset == self._ingest_offset:
                return delivered
            links: list[tuple[int, TimerRecord]] = []
            due_now: list[tuple[int, StoredMessage]] = []
            for stored in got.messages:
                deliver_ms = self._deliver_ms_of(stored)
                target = link_target_ms(
                    deliver_ms, self._read_time, self._horizon_ms(), self.precision_ms
                )
                if target is None:
                    due_now.append((deliver_ms, stored))
                else:
                    rec = TimerRecord(deliver_ms, stored.physical_offset, stored.stored_size)
                    links.append((target, rec))
            self._wheel.link(self._log, links)
            due_now.sort(key=lambda item: item[0])
            delivered += self._put_real([stored for _, stored in due_now])
            self.stats.ingested += len(got.messages)
            self._ingest_offset, self._dirty = got.next_offset, True

    def _deliver_ms_of(self, stored: StoredMessage) -> int:
        try:
            return deliver_time_of(stored.properties)
        except InvalidArgumentError as exc:
            log.error("timer message at %d: %s; delivering it now", stored.physical_offset, exc)
            return 0

    # ---- firing -----------------------------------------------------------------------

    def _fire(self, slot_time: int) -> int:
        """Fire one slot time: walk its chain only, roll what is not due, deliver the rest."""
        chain = self._wheel.walk(self._log, slot_time)
        self.stats.slots_fired += 1
        self.stats.records_visited += len(chain)
        if not chain:
            return 0
        plan = plan_firing(chain, slot_time, self.precision_ms)
        rolls = []
        for rec in plan.roll:
            target = link_target_ms(
                rec.deliver_ms, slot_time, self._horizon_ms(), self.precision_ms
            )
            assert target is not None and target > slot_time
            rolls.append((target, rec))
        self._wheel.link(self._log, rolls)
        self.stats.rolled += len(rolls)
        messages: list[StoredMessage] = []
        for rec in plan.deliver:
            try:
                messages.append(self._store.read_message(rec.phys_offset, rec.size))
            except (CorruptionError, OffsetOutOfRangeError) as exc:
                log.error("timer at commitlog offset %d cannot be read: %s", rec.phys_offset, exc)
                self.stats.dropped += 1
        self._dirty = True
        return self._put_real(messages)

    def _put_real(self, stored: Sequence[StoredMessage]) -> int:
        """Re-put held messages to their real topics, in the order given."""
        real: list[Message] = []
        for msg in stored:
            try:
                real.append(restore_real_message(msg, TIMER_PROPERTIES))
            except InvalidArgumentError as exc:
                log.error("timer message at %d dropped: %s", msg.physical_offset, exc)
                self.stats.dropped += 1
        for start in range(0, len(real), self._batch_size):
            puts = self._store.put_messages(real[start : start + self._batch_size])
            self.fired("timer", puts)
        self.stats.delivered += len(real)
        return len(real)

    # ---- the thread -------------------------------------------------------------------

    def _wait_ms(self) -> int:
        return max(0, min(self.read_time_ms - self._clock_ms(), self._max_idle_wait_ms))

    def close(self) -> None:
        """Stop the thread, write the checkpoint and close the log and wheel files."""
        self.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._log.flush()
            self._wheel.flush()
            self._save_checkpoint()
            self._log.close()
            self._wheel.close()
