"""Delay levels: hold a message for one of 18 fixed delays, then deliver it to its real topic.

RocketMQ's ``ScheduleMessageService``. On the send path the broker rewrites a message with
delay level ``L`` (1..18, ``retry.DELAY_LEVELS_MS``) with :func:`to_schedule_message`: it
is stored under ``SCHEDULE_TOPIC`` queue ``L - 1`` with ``REAL_TOPIC`` / ``REAL_QID``
naming its destination and ``DELAY = L``. Every message of one level queue has the same
delay and the queue is in store order, so the queue is in due order: a message is due at
``store_timestamp_ms + delay_level_ms(L)``, and delivery only ever looks at the head of
each level queue — never at everything pending. A due message is re-put to its real
topic and queue with the three schedule properties removed (every other property —
``UNIQ_KEY``, ``KEYS``, ``TAGS``, user properties — and ``reconsume_times``, flags and
born host/time are kept), then the level's delivery offset advances.

>>> import tempfile
>>> from pathlib import Path
>>> from broker_core.config import StoreConfig
>>> from broker_core.store.message_store import MessageStore
>>> clock = [1_000_000]
>>> store = MessageStore(StoreConfig(store_dir=tempfile.mkdtemp(), segment_size_bytes=1 << 20,
...                                  max_body_bytes=1024), clock_ms=lambda: clock[0])
>>> _ = store.open()
>>> service = ScheduleService(store, Path(store.config.store_dir) / "delayOffset.json",
...                           clock_ms=lambda: clock[0])
>>> _ = service.schedule(Message("orders", b"later"), level=1)  # level 1 = 1 s
>>> _ = store.wait_dispatched()
>>> service.run_once(clock[0] + 999), service.run_once(clock[0] + 1_000)
(0, 1)
>>> service.close(); store.close()

Durability and recovery: the scheduled messages live in the commitlog (the only truth).
The per-level delivery offsets are written to ``offsets_path`` (``delayOffset.json``,
:func:`write_json_atomic`) after each delivered batch, once the store accepted the
re-put. A crash between the re-put and that write redelivers the batch after restart:
delivery is at-least-once, and nothing is lost. On restart the service simply resumes
each level from its persisted offset; messages that fell due while the broker was down
are delivered by the first ``run_once``. An offset below the queue's minimum (retention
removed the messages) is moved up to the minimum with a warning.

Threads: ``run_once``, ``next_due_ms``, ``offsets`` and ``schedule`` may be called from
any thread; one lock serialises delivery. ``start()`` runs the delivery loop in a daemon
thread that sleeps until the next head is due or until the store's dispatch thread
reports a new ``SCHEDULE_TOPIC`` message (the listener only sets an event).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_core.broker.retry import MAX_DELAY_LEVEL, delay_level_ms, schedule_queue_id
from broker_core.broker.system_topics import SCHEDULE_TOPIC
from broker_core.broker.timer.delivery import delivery_thread
from broker_core.clock import now_ms
from broker_core.errors import (
    ConfigError,
    InvalidArgumentError,
    OffsetOutOfRangeError,
)
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    Message,
    StoredMessage,
)
from broker_core.service_thread import ThreadedService
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.message_store import MessageStore, PutResult
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

# (how, puts) of messages put back when due: message trace's Timer records
Fired = Callable[[str, Sequence[PutResult]], None]
SCHEDULE_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_DELAY_LEVEL)
LEVELS = range(1, MAX_DELAY_LEVEL + 1)

# --------------------------------------------------------------------------- pure rewriting


def to_schedule_message(msg: Message, level: int, now_ms: int) -> Message:
    """The message to store instead of ``msg`` when it is sent with delay ``level``.

    Pure: ``msg`` is not modified. ``born_timestamp_ms`` is set to ``now_ms`` only when
    the producer left it 0. Raises InvalidArgumentError for a level outside 1..18.
    """
    queue_id = schedule_queue_id(level)
    props = dict(msg.properties)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props[PROPERTY_DELAY_LEVEL] = str(level)
    return dataclasses.replace(
        msg,
        topic=SCHEDULE_TOPIC,
        queue_id=queue_id,
        properties=props,
        born_timestamp_ms=msg.born_timestamp_ms or now_ms,
    )


def real_destination(properties: dict[str, str]) -> tuple[str, int]:
    """``(REAL_TOPIC, REAL_QID)`` of a rewritten message; InvalidArgumentError if absent."""
    topic = properties.get(PROPERTY_REAL_TOPIC, "")
    raw_qid = properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not raw_qid.isdigit():
        raise InvalidArgumentError(
            f"message has no real destination (REAL_TOPIC={topic!r}, REAL_QID={raw_qid!r})"
        )
    return topic, int(raw_qid)


def restore_real_message(stored: StoredMessage, system_properties: Iterable[str]) -> Message:
    """The message to deliver for a held ``stored`` one: real topic/queue, system keys dropped.

    Pure. Everything else the producer set is carried over unchanged, including
    ``UNIQ_KEY`` (so the client-visible message id survives the detour).
    """
    topic, queue_id = real_destination(stored.properties)
    dropped = set(system_properties)
    props = {k: v for k, v in stored.properties.items() if k not in dropped}
    return Message(
        topic,
        stored.body,
        queue_id=queue_id,
        properties=props,
        flag=stored.flag,
        sys_flag=stored.sys_flag,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        reconsume_times=stored.reconsume_times,
        prepared_transaction_offset=stored.prepared_transaction_offset,
    )


def level_due_ms(store_timestamp_ms: int, level: int) -> int:
    """When a message of delay ``level`` stored at ``store_timestamp_ms`` is due."""
    return store_timestamp_ms + delay_level_ms(level)


# --------------------------------------------------------------------------- service


@dataclass(slots=True)
class _Scan:
    """The due prefix read from one level queue."""

    messages: list[Message]
    next_offset: int  # the level offset once ``messages`` are delivered
    head_due_ms: int | None  # due time of the first message not yet due; None = unknown


class ScheduleService(ThreadedService):
    """Delivers delay-level messages from ``SCHEDULE_TOPIC`` to their real topics."""

    def __init__(
        self,
        store: MessageStore,
        offsets_path: Path,
        clock_ms: Callable[[], int] = now_ms,
        *,
        batch_size: int = 64,
        max_idle_wait_ms: int = 10_000,
    ) -> None:
        if batch_size < 1 or max_idle_wait_ms < 1:
            raise ConfigError("batch_size and max_idle_wait_ms must be ≥ 1")
        self._store = store
        self._path = offsets_path
        self._clock_ms = clock_ms
        self._batch_size = batch_size
        self._max_idle_wait_ms = max_idle_wait_ms
        self._lock = threading.Lock()
        self._offsets: dict[int, int] = self._load()
        self._head_due: dict[int, int | None] = {}
        self.fired: Fired = lambda _how, _puts: None
        self.thread = delivery_thread(
            "schedule-delivery",
            store,
            SCHEDULE_TOPIC,
            self.run_once,
            max_idle_wait_ms=max_idle_wait_ms,
            next_wait_ms=self._wait_ms,
        )

    def _load(self) -> dict[int, int]:
        loaded = read_json_atomic(self._path)
        if loaded.source == "backup":
            log.warning("delay offsets: %s, using the backup copy", loaded.problem)
        if loaded.data is None:
            return {}
        try:
            offsets = {int(level): int(off) for level, off in loaded.data["offsets"].items()}
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{self._path} holds malformed delay offsets: {exc}") from exc
        return {level: off for level, off in offsets.items() if level in LEVELS}

    def _persist(self) -> None:
        doc = {"offsets": {str(level): off for level, off in sorted(self._offsets.items())}}
        write_json_atomic(self._path, doc)

    # ---- API --------------------------------------------------------------------------

    def to_schedule_message(self, msg: Message, level: int, now_ms: int | None = None) -> Message:
        """See :func:`to_schedule_message`; ``now_ms`` defaults to the service clock."""
        return to_schedule_message(msg, level, self._clock_ms() if now_ms is None else now_ms)

    def schedule(self, msg: Message, level: int) -> PutResult:
        """Store ``msg`` for delivery after delay ``level``."""
        return self._store.put_message(self.to_schedule_message(msg, level))

    def offsets(self) -> dict[int, int]:
        """{level: delivery offset} of the levels that have delivered something."""
        with self._lock:
            return dict(self._offsets)

    def next_due_ms(self) -> int | None:
        """The earliest known due time of a level head; None when nothing known is pending.

        A level whose head has not been read since new messages arrived counts as
        unknown; ``run_once`` reads it (and the dispatch listener wakes the thread).
        """
        with self._lock:
            known = [due for due in self._head_due.values() if due is not None]
        return min(known) if known else None

    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver every message due at ``now_ms``; returns how many were delivered."""
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            return sum(self._deliver_level(level, now) for level in LEVELS)

    # ---- delivery ---------------------------------------------------------------------

    def _deliver_level(self, level: int, now: int) -> int:
        delivered = 0
        while True:
            head_due = self._head_due.get(level)
            if head_due is not None and head_due > now:
                return delivered
            offset = self._offsets.get(level, 0)
            if offset == self._store.max_offset(SCHEDULE_TOPIC, schedule_queue_id(level)):
                self._head_due[level] = None  # empty: cheap check until something arrives
                return delivered
            scan = self._scan_due(level, offset, now)
            self._head_due[level] = scan.head_due_ms
            if scan.next_offset == offset:
                return delivered
            for start in range(0, len(scan.messages), self._batch_size):
                puts = self._store.put_messages(scan.messages[start : start + self._batch_size])
                self.fired(f"delay level={level}", puts)
            self._offsets[level] = scan.next_offset
            self._persist()
            delivered += len(scan.messages)

    def _scan_due(self, level: int, offset: int, now: int) -> _Scan:
        queue_id = schedule_queue_id(level)
        try:
            result = self._store.get_messages(
                QueueRead(SCHEDULE_TOPIC, queue_id, offset, self._batch_size)
            )
        except OffsetOutOfRangeError as exc:
            moved = exc.min_offset if offset < exc.min_offset else exc.max_offset
            log.warning(
                "delay level %d: offset %d out of range, moving to %d (%s)",
                level,
                offset,
                moved,
                exc,
            )
            return _Scan([], moved, None)
        out: list[Message] = []
        for stored in result.messages:
            due = level_due_ms(stored.store_timestamp_ms, level)
            if due > now:
                return _Scan(out, stored.queue_offset, due)
            try:
                out.append(restore_real_message(stored, SCHEDULE_PROPERTIES))
            except InvalidArgumentError as exc:
                log.error("delay level %d offset %d dropped: %s", level, stored.queue_offset, exc)
        return _Scan(out, result.next_offset, None)

    # ---- the thread -------------------------------------------------------------------

    def _wait_ms(self) -> int:
        due = self.next_due_ms()
        if due is None:
            return self._max_idle_wait_ms
        return max(0, min(due - self._clock_ms(), self._max_idle_wait_ms))

    def close(self) -> None:
        """Stop the thread; offsets are already durable after every delivered batch."""
        self.stop()
