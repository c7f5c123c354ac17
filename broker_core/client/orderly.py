"""Orderly pull: one client of a group reads a queue in offset order, holding its lock.

RocketMQ's orderly consumers lock each queue at the broker (``lockBatchMQ``) before
consuming it, so that while a rebalance moves queues between the clients of a group no
two of them consume one queue at the same time. :class:`OrderlyPuller` does the same
over the admin service's ``LockQueues`` / ``UnlockQueues`` (``server/handlers/admin_locks.py``):

* :meth:`OrderlyPuller.pull` reads a queue from where this client stands, which is the
  group's committed offset whenever it (re)gains the queue's lock. It locks the queue
  first and refreshes the lock once it is ``refresh_s`` old (RocketMQ: every 20 s; the
  broker lets a lock expire after ``queue_lock_expiry_ms``, 60 s by default). A queue
  another client holds raises :class:`~broker_core.errors.QueueLockedError`
  (retriable: the lock is free once its holder unlocks or stops refreshing).
* :meth:`OrderlyPuller.commit` commits the offset after processing, and only while
  the lock is held, so a client that lost its queue never overwrites the new holder's
  progress.
* :meth:`OrderlyPuller.close` releases every lock it holds.

Example (with a broker on 127.0.0.1:8081)::

    with RocketMQClient("127.0.0.1:8081") as client:
        puller = OrderlyPuller(client, "GID_ordered", "orders")
        batch = puller.pull(0, 32)
        ...  # process batch.messages in order
        puller.commit(0, batch.next_offset)
        puller.close()

Threads: not thread-safe; use one puller per thread (each with its own client id).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from broker_core.client.client import RocketMQClient
from broker_core.client.model import PullBatch
from broker_core.errors import InvalidArgumentError, QueueLockedError

DEFAULT_REFRESH_S = 20.0  # RocketMQ's client re-locks every 20 s
DEFAULT_EXPIRY_S = 60.0  # the broker's default queue_lock_expiry_ms


class OrderlyPuller:
    """Pull queues of ``topic`` for ``group`` in order, under the broker's queue locks."""

    def __init__(
        self,
        client: RocketMQClient,
        group: str,
        topic: str,
        *,
        refresh_s: float = DEFAULT_REFRESH_S,
        expiry_s: float = DEFAULT_EXPIRY_S,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        """``expiry_s`` must not exceed the broker's lock expiry: a lock older than that
        is treated as lost (the position is re-read from the committed offset)."""
        if not 0 < refresh_s < expiry_s:
            raise InvalidArgumentError("OrderlyPuller needs 0 < refresh_s < expiry_s")
        self.client, self.group, self.topic = client, group, topic
        self._refresh_s, self._expiry_s, self._clock_s = refresh_s, expiry_s, clock_s
        self._locked_at: dict[int, float] = {}  # queue id -> when its lock was last renewed
        self._position: dict[int, int] = {}  # queue id -> next offset this client reads

    @property
    def held(self) -> set[int]:
        """Queue ids whose lock this puller renewed within the expiry."""
        now = self._clock_s()
        return {q for q, at in self._locked_at.items() if now - at < self._expiry_s}

    def lock(self, queue_ids: Iterable[int]) -> set[int]:
        """Lock (or refresh) ``queue_ids``; returns those held now. Queues newly gained
        start from the group's committed offset on the next pull."""
        asked = list(dict.fromkeys(queue_ids))
        fresh = set(asked) - self.held
        now = self._clock_s()
        got = self.client.lock_queues(
            self.group, self.topic, asked, client_id=self.client.client_id
        )
        for qid in asked:
            if qid in got:
                self._locked_at[qid] = now
            else:
                self._forget(qid)
        for qid in fresh:
            self._position.pop(qid, None)
        return got

    def pull(self, queue_id: int, max_count: int, *, long_polling_timeout_ms: int = 0) -> PullBatch:
        """The next messages of the queue in offset order; QueueLockedError if another
        client holds the queue. The position advances past what is returned."""
        self._ensure_lock(queue_id)
        offset = self._position.get(queue_id)
        if offset is None:
            offset = self.client.get_offset(self.group, self.topic, queue_id)
        batch = self.client.pull(
            self.group,
            self.topic,
            queue_id,
            offset,
            max_count,
            long_polling_timeout_ms=long_polling_timeout_ms,
        )
        self._position[queue_id] = batch.next_offset
        return batch

    def commit(self, queue_id: int, next_offset: int) -> None:
        """Commit ``next_offset`` for the group; QueueLockedError if the lock was lost."""
        self._ensure_lock(queue_id)
        self.client.update_offset(self.group, self.topic, queue_id, next_offset)

    def close(self) -> set[int]:
        """Release every lock this puller holds; returns the queue ids released."""
        mine = list(self._locked_at)
        self._locked_at.clear()
        self._position.clear()
        if not mine:
            return set()
        return self.client.unlock_queues(
            self.group, self.topic, mine, client_id=self.client.client_id
        )

    def _ensure_lock(self, queue_id: int) -> None:
        at = self._locked_at.get(queue_id)
        if at is not None and self._clock_s() - at < self._refresh_s:
            return
        if queue_id not in self.lock([queue_id]):
            raise QueueLockedError(
                f"queue {self.topic}:{queue_id} of group {self.group} is locked by another "
                f"client; retry once it is released or its lock expires"
            )

    def _forget(self, queue_id: int) -> None:
        self._locked_at.pop(queue_id, None)
        self._position.pop(queue_id, None)
