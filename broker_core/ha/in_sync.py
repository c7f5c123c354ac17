"""The master's in-sync set and the wait of a sync-replicated send.

Each connected slave has an acked offset (its last report) and a *catch-up target*: the
master's commitlog end at a known time, ``target_at``. A report at or past the target
proves the slave holds everything the master had at ``target_at``: that time becomes the
slave's ``fresh_at`` and the target moves to the master's end now; a report that covers
the master's whole log makes ``fresh_at`` now. So a slave that keeps up under continuous
load is fresh as of its previous report, and an idle one as of its last heartbeat.

Rules:

* A slave is **in sync** when it holds everything the master had within the last
  ``window_ms`` (``now - fresh_at <= window``). Measured by when the reached target was
  set, not by when it was reached: a slave that needs longer than the window to copy a
  backlog (new, restarted, back from a freeze) reaches its first target holding only
  what the master had when it connected, and joins only once it reaches a target set
  within the window. So with async replication a slave in the set never lacks a byte
  appended more than ``window_ms`` before the master's last look at the set, which is
  what bounds the loss of a failover to it. A disconnected slave leaves at once.
* A sync send ending at offset E waits until every in-sync slave acked ≥ E. The set is
  re-evaluated while waiting, so a slave that falls out of it stops holding sends.
* The master counts as one replica. Fewer than ``min_replicas`` in the set (master
  included): InSyncReplicasNotEnoughError at once. Not acked in ``timeout_ms``:
  ReplicationTimeoutError (RocketMQ's FLUSH_SLAVE_TIMEOUT); both are retriable.

Threads: every method may be called from any thread; one condition guards the state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.errors import InSyncReplicasNotEnoughError, ReplicationTimeoutError

log = logging.getLogger(__name__)
_RECHECK_S = 0.05  # waiting sends re-evaluate the set at least this often


@dataclass(slots=True)
class _Slave:
    name: str
    acked: int = 0
    target: int = 0
    target_at: float = 0.0  # when ``target`` was the master's end
    fresh_at: float = float("-inf")  # the slave holds all the master had at this time
    in_sync: bool = False


class InSyncSet:
    """Slaves' acked offsets and which of them are in sync (see the module docstring)."""

    def __init__(
        self, *, window_ms: int, min_replicas: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_ms / 1000
        self.min_replicas = min_replicas
        self._clock = clock
        self._cond = threading.Condition()
        self._slaves: dict[int, _Slave] = {}
        # Controller mode: links of slaves in etcd's in-sync set; a send waits for them too
        # (even disconnected or not caught up) until the master shrinks the set in etcd.
        self.required: set[str] = set()

    def join(self, link_id: int, name: str, master_end: Callable[[], int]) -> None:
        """A slave connected; ``master_end()`` (the log's end now) is its first target."""
        with self._cond:
            now = self._clock()  # read first: the end read after it is at least as far
            self._slaves[link_id] = _Slave(name, target=master_end(), target_at=now)

    def leave(self, link_id: int) -> None:
        with self._cond:
            gone = self._slaves.pop(link_id, None)
            if gone is not None and gone.in_sync:
                log.warning("slave %s left the in-sync set (disconnected)", gone.name)
            self._cond.notify_all()

    def report(self, link_id: int, acked: int, master_end: Callable[[], int]) -> None:
        """A slave stored everything below ``acked``; ``master_end()`` is the log's end
        now (the next target once this one is reached)."""
        with self._cond:
            slave = self._slaves.get(link_id)
            if slave is None:
                return
            slave.acked = acked
            if acked >= slave.target:
                now = self._clock()  # before the end: the target holds all appended by now
                end = master_end()
                # holding the master's whole log proves freshness as of now, not only as
                # of when the reached target was set (an idle group, a slave back from a
                # freeze with nothing to copy)
                slave.fresh_at = now if acked >= end else slave.target_at
                slave.target, slave.target_at = end, now
            self._refresh(self._clock())
            self._cond.notify_all()

    def _refresh(self, now: float) -> list[_Slave]:
        """Update membership (logging changes); returns the in-sync slaves."""
        members = []
        for slave in self._slaves.values():
            fresh = now - slave.fresh_at <= self._window_s
            if fresh != slave.in_sync:
                slave.in_sync = fresh
                log.warning(
                    "slave %s %s the in-sync set (acked %d)",
                    slave.name,
                    "joined" if fresh else "left",
                    slave.acked,
                )
            if fresh:
                members.append(slave)
        return members

    def members(self) -> dict[str, int]:
        """In-sync slaves' names and acked offsets."""
        with self._cond:
            return {s.name: s.acked for s in self._refresh(self._clock())}

    def connected(self) -> dict[str, int]:
        """Every connected slave's name and acked offset."""
        with self._cond:
            return {s.name: s.acked for s in self._slaves.values()}

    def wait(self, offset: int, timeout_ms: int) -> None:
        """Return once every in-sync slave acked ``offset`` (see the rules above)."""
        deadline = self._clock() + timeout_ms / 1000
        with self._cond:
            while True:
                now = self._clock()
                members = self._refresh(now)
                if len(members) + 1 < self.min_replicas:
                    raise InSyncReplicasNotEnoughError(
                        f"sync replication needs {self.min_replicas} in-sync replicas, the "
                        f"group has {len(members) + 1} (master included); retry later"
                    )
                behind = [s.name for s in members if s.acked < offset]
                acked = {s.name for s in self._slaves.values() if s.acked >= offset}
                behind += sorted(self.required - acked - set(behind))
                if not behind:
                    return
                if now >= deadline:
                    raise ReplicationTimeoutError(
                        f"FLUSH_SLAVE_TIMEOUT: in-sync slave(s) {', '.join(behind)} did not "
                        f"ack offset {offset} within {timeout_ms} ms; the message is stored "
                        "on the master and may still be replicated"
                    )
                self._cond.wait(min(deadline - now, _RECHECK_S))
