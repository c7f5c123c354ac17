"""A broker's place in its group: master (HA port, in-sync set) or slave (HA link).

Roles are static here: the config's ``role`` (broker id 0 is the master, any other id a
slave of the master at ``ha_master``); in controller mode a slave may be promoted in place
(``promote``). A slave's store refuses client writes (NotMasterError: "broker X is a
slave") and its broker runs no service that appends (delay levels, timers, transaction
checks, POP revive): its log holds only its master's bytes.

``Replication`` gets only what it needs (``ports``): append access to the store and the
config tables' snapshot/apply (``metadata.ConfigTables``), never the whole broker. Its
threads (the slave's link and table copy, the master's accept loop, the controller's
loop) are ``ServiceThread``s listed by ``threads()``, so the broker's health shows them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from broker_core.config import BrokerConfig, Role
from broker_core.errors import MasterFencedError, NotMasterError
from broker_core.ha.in_sync import InSyncSet
from broker_core.ha.master import HAMaster
from broker_core.ha.metadata import ConfigTables
from broker_core.ha.ports import ReplicaStore
from broker_core.ha.slave import HASlave
from broker_core.service_thread import ServiceThread

log = logging.getLogger(__name__)


class Replication:
    """Starts and stops the HA side of one broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, store: ReplicaStore, tables: ConfigTables) -> None:
        self._config = config
        self._store = store
        self._tables = tables
        self.role = config.role
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        # Controller mode (``attach_controller``): "" while this master may acknowledge
        # writes, else why not; and the controller's loop, listed with the HA threads.
        self._fence: Callable[[], str] | None = None
        self._controller: ServiceThread | None = None
        self.in_sync = InSyncSet(
            window_ms=config.ha_catch_up_window_ms, min_replicas=config.min_in_sync_replicas
        )

    @property
    def ha_endpoint(self) -> str:
        """The HA port a master listens on ("" when it does not)."""
        return self.master.endpoint if self.master is not None else ""

    @property
    def refusal(self) -> str:
        """What a client write to this slave is told."""
        cfg = self._config
        return (
            f"broker {cfg.broker_name} is a slave (broker id {cfg.broker_id}); send to its master"
        )

    def require_master(self) -> None:
        """NotMasterError on a slave."""
        if self.role is Role.SLAVE:
            raise NotMasterError(self.refusal)

    def log_end(self) -> int:
        """The commitlog's end offset (what the controller publishes)."""
        return self._store.commitlog.max_offset

    def on_table_copied(self, file_name: str, reload: Callable[[], None]) -> None:
        """Run ``reload`` when a slave copied a new version of ``file_name``, a table the
        broker does not own (the user/ACL table)."""
        self._tables.reloaders[file_name] = reload

    def attach_controller(self, fence: Callable[[], str], thread: ServiceThread) -> None:
        """Controller mode: writes are acknowledged only while ``fence()`` is ""; the
        controller's ``thread`` is listed by ``threads()``."""
        self._fence = fence
        self._controller = thread

    def threads(self) -> list[ServiceThread]:
        """The HA threads now in use (started or not)."""
        found = [*(self.slave.threads() if self.slave is not None else ())]
        if self.master is not None:
            found.append(self.master.accepter)
        if self._controller is not None:
            found.append(self._controller)
        return found

    def start(self) -> None:
        """Call with the store open, before the broker's services start."""
        cfg = self._config
        if self.role is Role.SLAVE:
            self._store.set_role(Role.SLAVE, self.refusal)
            self.slave = HASlave(
                self._store,
                cfg.ha_master,
                heartbeat_ms=cfg.ha_heartbeat_interval_ms,
                metadata_interval_ms=cfg.ha_metadata_interval_ms,
                apply_metadata=self._tables.apply,
            )
            self.slave.start()
        elif cfg.ha_listen:
            self._open_ha_port(cfg.ha_listen)
            log.info(
                "broker %s master: HA port %s, %s replication",
                cfg.broker_name,
                self.ha_endpoint,
                cfg.replication,
            )

    def _open_ha_port(self, listen: str) -> None:
        cfg = self._config
        self.master = HAMaster(
            self._store.commitlog,
            listen,
            in_sync=self.in_sync,
            sync=cfg.replication == "sync",
            timeout_ms=cfg.sync_replication_timeout_ms,
            heartbeat_ms=cfg.ha_heartbeat_interval_ms,
            metadata=self._tables.snapshot,
        )
        self._store.after_append = self.master.after_append

    def promote(self) -> None:
        """Controller mode: this slave becomes its group's master in place (its HA link
        already halted): writes are taken, the HA port opens (``ha_listen``)."""
        if self.slave is not None:
            self.slave.halt()
        self.slave = None
        # Before the first client write: queues go on from what the log holds, and topics
        # made on the master since the last copy of its table are derived from them.
        held = self._store.adopt_replicated_queues()
        if covered := self._tables.topics.cover_queues(held):
            log.warning("promoted: topic configs derived from the log: %s", ", ".join(covered))
        self._config = dataclasses.replace(self._config, broker_id=0, ha_master="")
        self.role = Role.MASTER
        self._store.set_role(Role.MASTER)
        self._open_ha_port(self._config.ha_listen or "127.0.0.1:0")
        log.warning(
            "broker %s promoted to master: HA port %s, %s replication",
            self._config.broker_name,
            self.ha_endpoint,
            self._config.replication,
        )

    def wait_replicated(self, end_offset: int) -> None:
        """Called by the broker after a client's write ended at ``end_offset``: with sync
        replication it returns once the in-sync slaves have it (``in_sync``), raising
        ReplicationTimeoutError or InSyncReplicasNotEnoughError otherwise.

        Only writes a client is told about wait (sends, held messages, transaction ends);
        the broker's own re-puts (delay levels, timers, POP revive) do not: a timeout
        there would make them put again.
        """
        if self.master is not None:
            self.master.wait_replicated(end_offset)
        if self._fence is not None and (why := self._fence()):
            raise MasterFencedError(f"{why}; the write is not acknowledged, retry")

    def stop(self) -> None:
        if self.slave is not None:
            self.slave.stop()
        if self.master is not None:
            self._store.after_append = None
            self.master.stop()

    def status(self) -> dict[str, Any]:
        """Role, HA addresses and, on a master, the connected and in-sync slaves with
        their acked offsets (the admin service's Health shows it)."""
        cfg = self._config
        status: dict[str, Any] = {
            "role": str(self.role),
            "broker_id": cfg.broker_id,
            "replication": cfg.replication,
        }
        if self.slave is not None:
            status.update(
                master=self.slave.master,
                connected=self.slave.connected.is_set(),
                last_error=self.slave.last_error,
            )
        if self.master is not None:
            status.update(
                ha_endpoint=self.master.endpoint,
                slaves=self.in_sync.connected(),
                in_sync=self.in_sync.members(),
            )
        return status
