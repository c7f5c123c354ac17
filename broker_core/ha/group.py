"""A broker's place in its group: master (HA port, in-sync set) or slave (HA link).

Roles are static here: broker id 0 is the master, any other id a slave of the master at
``ha_master`` (a controller will assign both later: ``Replication`` is what it would
switch). A slave's store refuses client writes (NotMasterError: "broker X is a slave")
and its broker runs no service that appends (delay levels, timers, transaction checks,
POP revive): its log holds only its master's bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.errors import MasterFencedError
from broker_core.ha import metadata
from broker_core.ha.in_sync import InSyncSet
from broker_core.ha.master import HAMaster
from broker_core.ha.slave import HASlave

if TYPE_CHECKING:
    from broker_core.broker.broker import Broker

log = logging.getLogger(__name__)


class Replication:
    """Starts and stops the HA side of one broker (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        cfg = broker.config
        self.is_slave = cfg.broker_id > 0
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        # Controller mode: "" while this master may acknowledge writes, else why not.
        self.fence: Callable[[], str] | None = None
        # Config file name -> what re-reads it after a slave copied the master's version of
        # a table the Broker does not own (the user/ACL table: ``auth/install.py``).
        self.reloaders: dict[str, Callable[[], None]] = {}
        self.in_sync = InSyncSet(
            window_ms=cfg.ha_catch_up_window_ms, min_replicas=cfg.min_in_sync_replicas
        )

    @property
    def ha_endpoint(self) -> str:
        """The HA port a master listens on ("" when it does not)."""
        return self.master.endpoint if self.master is not None else ""

    def start(self) -> None:
        """Call with the store open, before the broker's services start."""
        broker, cfg = self._broker, self._broker.config
        store = broker.store
        if self.is_slave:
            store.slave_of = (
                f"broker {cfg.broker_name} is a slave (broker id {cfg.broker_id}); "
                "send to its master"
            )
            self.slave = HASlave(
                store,
                cfg.ha_master,
                heartbeat_ms=cfg.ha_heartbeat_interval_ms,
                metadata_interval_ms=cfg.ha_metadata_interval_ms,
                apply_metadata=lambda body: metadata.apply(broker, body, self.reloaders),
            )
            self.slave.start()
        elif cfg.ha_listen:
            self.master = HAMaster(
                store.commitlog,
                cfg.ha_listen,
                in_sync=self.in_sync,
                sync=cfg.replication == "sync",
                timeout_ms=cfg.sync_replication_timeout_ms,
                heartbeat_ms=cfg.ha_heartbeat_interval_ms,
                metadata=lambda: metadata.snapshot(broker),
            )
            store.after_append = self.master.after_append
            log.info(
                "broker %s master: HA port %s, %s replication",
                cfg.broker_name,
                self.master.endpoint,
                cfg.replication,
            )

    def promote(self) -> None:
        """Controller mode: this slave becomes its group's master in place (its HA link
        already halted): writes are taken, the HA port opens (``ha_listen``)."""
        broker, cfg = self._broker, self._broker.config
        if self.slave is not None:
            self.slave.halt()
        self.slave = None
        # Before the first client write: queues go on from what the log holds, and topics
        # made on the master since the last copy of its table are derived from them.
        if covered := broker.topics.cover_queues(broker.store.adopt_replicated_queues()):
            log.warning("promoted: topic configs derived from the log: %s", ", ".join(covered))
        self.is_slave = False
        broker.store.slave_of = ""
        self.master = HAMaster(
            broker.store.commitlog,
            cfg.ha_listen or "127.0.0.1:0",
            in_sync=self.in_sync,
            sync=cfg.replication == "sync",
            timeout_ms=cfg.sync_replication_timeout_ms,
            heartbeat_ms=cfg.ha_heartbeat_interval_ms,
            metadata=lambda: metadata.snapshot(broker),
        )
        broker.store.after_append = self.master.after_append
        log.warning(
            "broker %s promoted to master: HA port %s, %s replication",
            cfg.broker_name,
            self.master.endpoint,
            cfg.replication,
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
        if self.fence is not None and (why := self.fence()):
            raise MasterFencedError(f"{why}; the write is not acknowledged, retry")

    def stop(self) -> None:
        if self.slave is not None:
            self.slave.stop()
        if self.master is not None:
            self._broker.store.after_append = None
            self.master.stop()

    def status(self) -> dict[str, Any]:
        """Role, HA addresses and, on a master, the connected and in-sync slaves with
        their acked offsets (the admin service's Health shows it)."""
        cfg = self._broker.config
        status: dict[str, Any] = {
            "role": "slave" if self.is_slave else "master",
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
