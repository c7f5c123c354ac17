"""What replication needs of the message store: narrow interfaces instead of the broker.

``ha`` never imports the broker: the broker builds its ``Replication`` and hands it these
(its ``MessageStore`` fits both structurally). The config tables a slave copies have their
own interface, ``metadata.ConfigTables``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from broker_core.config import Role
from broker_core.store.commitlog import CommitLog


class ReplicaLog(Protocol):
    """A slave's append access: the commitlog's end, and storing the master's bytes at the
    same offsets (returns how many whole verified bytes were stored)."""

    @property
    def commitlog(self) -> CommitLog: ...

    def append_replica(self, offset: int, data: bytes) -> int: ...


class ReplicaStore(ReplicaLog, Protocol):
    """The store as replication drives it: the role that refuses client writes, the
    master's append hook (wakes HA senders), and a promoted slave's queue adoption."""

    after_append: Callable[[int], None] | None

    def set_role(self, role: Role, refusal: str = "") -> None: ...

    def adopt_replicated_queues(self) -> dict[str, int]: ...
