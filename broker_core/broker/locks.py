"""Queue locks for orderly pull consumers (RocketMQ's lockBatchMQ / unlockBatchMQ).

Within a consumer group each queue is held by at most one client at a time, so the
messages of that queue are consumed in order by one process even while a rebalance
moves queues between clients. A lock lasts ``expiry_ms`` (RocketMQ: 60 s) from its last
refresh; the holder re-locks periodically (RocketMQ's client every 20 s) to keep it. A
lock that was not refreshed in time may be taken over by another client of the group.
Different groups never contend: they consume the same queue independently.

The decision for one queue is the pure function :func:`lock_outcome`; the manager
applies it to a table under one lock.

Durability: none. Locks live in memory and are lost on a broker restart; clients re-lock
within their refresh interval, as they do with RocketMQ. Every method may be called from
any thread.

>>> from broker_core.broker.rebalance import MessageQueue
>>> clock = [0]
>>> locks = QueueLockManager(expiry_ms=60_000, clock_ms=lambda: clock[0])
>>> q0 = MessageQueue("orders", "broker-a", 0)
>>> locks.lock("g", "client-1", [q0]) == {q0}, locks.lock("g", "client-2", [q0])
(True, set())
>>> clock[0] = 60_001  # client-1 stopped refreshing
>>> locks.lock("g", "client-2", [q0]) == {q0}
True
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker_core.broker.rebalance import MessageQueue
from broker_core.clock import monotonic_ms
from broker_core.errors import ConfigError, InvalidArgumentError
from broker_core.message import validate_group_name

DEFAULT_LOCK_EXPIRY_MS = 60_000


@dataclass(frozen=True, slots=True)
class LockEntry:
    """Who holds a queue and when they last locked it (manager clock)."""

    client_id: str
    last_locked_ms: int


class LockOutcome(enum.Enum):
    """What a lock request does to one queue."""

    ACQUIRED = "ACQUIRED"  # nobody held it
    REFRESHED = "REFRESHED"  # the requester already held it (even if just expired)
    TAKEN_OVER = "TAKEN_OVER"  # another client's lock had expired
    DENIED = "DENIED"  # another client holds a live lock

    @property
    def granted(self) -> bool:
        return self is not LockOutcome.DENIED


def is_expired(entry: LockEntry, now_ms: int, expiry_ms: int) -> bool:
    """A lock is live for ``expiry_ms`` after its last refresh, inclusive."""
    return now_ms - entry.last_locked_ms > expiry_ms


def lock_outcome(
    entry: LockEntry | None, client_id: str, now_ms: int, expiry_ms: int
) -> LockOutcome:
    """Decide one queue's lock request (pure).

    >>> held = LockEntry("a", 0)
    >>> [lock_outcome(e, c, t, 10).name for e, c, t in
    ...  [(None, "a", 0), (held, "a", 5), (held, "b", 10), (held, "b", 11)]]
    ['ACQUIRED', 'REFRESHED', 'DENIED', 'TAKEN_OVER']
    """
    if entry is None:
        return LockOutcome.ACQUIRED
    if entry.client_id == client_id:
        return LockOutcome.REFRESHED
    if is_expired(entry, now_ms, expiry_ms):
        return LockOutcome.TAKEN_OVER
    return LockOutcome.DENIED


def _check_client(group: str, client_id: str) -> None:
    validate_group_name(group)
    if not client_id:
        raise InvalidArgumentError("client id is empty")


class QueueLockManager:
    """Per-group exclusive queue locks with expiry; thread-safe."""

    def __init__(
        self,
        expiry_ms: int = DEFAULT_LOCK_EXPIRY_MS,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        if expiry_ms <= 0:
            raise ConfigError(f"lock expiry_ms must be > 0, got {expiry_ms}")
        self.expiry_ms = expiry_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def lock(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock ``queues`` for ``client_id``; returns those it now holds.

        Queues it already held are refreshed; expired locks of other clients are taken
        over; queues another client holds live are left out of the answer.
        """
        _check_client(group, client_id)
        held: set[MessageQueue] = set()
        with self._lock:
            now_ms = self._clock_ms()
            table = self._table.setdefault(group, {})
            for queue in set(queues):
                if lock_outcome(table.get(queue), client_id, now_ms, self.expiry_ms).granted:
                    table[queue] = LockEntry(client_id, now_ms)
                    held.add(queue)
            if not table:
                del self._table[group]
        return held

    def unlock(
        self, group: str, client_id: str, queues: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Release those of ``queues`` that ``client_id`` holds; returns them.

        Queues held by another client are left alone (a late unlock from a client whose
        lock was taken over must not free the new holder's lock).
        """
        _check_client(group, client_id)
        released: set[MessageQueue] = set()
        with self._lock:
            table = self._table.get(group, {})
            for queue in set(queues):
                entry = table.get(queue)
                if entry is not None and entry.client_id == client_id:
                    del table[queue]
                    released.add(queue)
            self._drop_if_empty(group)
        return released

    def release_client(self, group: str, client_id: str) -> set[MessageQueue]:
        """Release every queue ``client_id`` holds in ``group`` (it left or was evicted)."""
        with self._lock:
            table = self._table.get(group, {})
            mine = {q for q, e in table.items() if e.client_id == client_id}
            for queue in mine:
                del table[queue]
            self._drop_if_empty(group)
        return mine

    def is_locked_by(self, group: str, queue: MessageQueue, client_id: str) -> bool:
        """True if ``client_id`` holds a live (unexpired) lock on ``queue`` in ``group``."""
        with self._lock:
            entry = self._table.get(group, {}).get(queue)
            return (
                entry is not None
                and entry.client_id == client_id
                and not is_expired(entry, self._clock_ms(), self.expiry_ms)
            )

    def holder(self, group: str, queue: MessageQueue) -> str | None:
        """The client holding a live lock on ``queue``, or None."""
        with self._lock:
            entry = self._table.get(group, {}).get(queue)
            if entry is None or is_expired(entry, self._clock_ms(), self.expiry_ms):
                return None
            return entry.client_id

    def locked_queues(self, group: str, client_id: str) -> set[MessageQueue]:
        """The queues ``client_id`` holds live locks on in ``group``."""
        with self._lock:
            now_ms = self._clock_ms()
            table = self._table.get(group, {})
            return {
                q
                for q, e in table.items()
                if e.client_id == client_id and not is_expired(e, now_ms, self.expiry_ms)
            }

    def purge_expired(self) -> int:
        """Forget expired locks (of clients that vanished); returns how many."""
        removed = 0
        with self._lock:
            now_ms = self._clock_ms()
            for group in list(self._table):
                table = self._table[group]
                for queue in [q for q, e in table.items() if is_expired(e, now_ms, self.expiry_ms)]:
                    del table[queue]
                    removed += 1
                self._drop_if_empty(group)
        return removed

    def _drop_if_empty(self, group: str) -> None:
        if group in self._table and not self._table[group]:
            del self._table[group]
