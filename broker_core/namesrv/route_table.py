"""``RouteTable``: the NameServer's soft state (RocketMQ's ``RouteInfoManager``).

Tables, all guarded by one lock::

    topic_queues   topic -> {broker_name -> QueueData}
    groups         broker_name -> _Group(cluster, addrs {broker_id -> addr}, grpc {id -> addr})
    clusters       cluster -> {broker_name}
    live           (cluster, broker_addr) -> _Live(data_version, timeout, last update, channel)

Rules (as RocketMQ's):

* A registration of the master (id 0), or of the lowest-id slave while the group has no
  master, replaces the group's queue data when its data version changed (or on first
  registration): topics it no longer lists lose that group's queues.
* One address holds one broker id: re-registering an address under a new id (slave
  promoted to master) drops its old id.
* A registration that claims a broker id held by another live address whose data
  version has a newer ``state_version`` is refused (``StaleRegistrationError``).
* A replica is removed by UNREGISTER_BROKER, when its registering connection closes, or
  when it has not registered or sent a heartbeat for ``min(its heartbeat timeout,
  broker_expiry_ms)``. A group without replicas disappears from its cluster and from every
  topic; a topic without groups disappears.

Nothing is persisted: a restarted NameServer is empty until brokers re-register.
Thread-safe: every public method takes the lock; results are snapshots.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.clock import now_ms
from broker_core.errors import StaleRegistrationError, TopicNotFoundError
from broker_core.namesrv.model import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    MASTER_ID,
    BrokerData,
    BrokerLive,
    BrokerRegistration,
    ClusterInfo,
    QueueData,
    RegisterResult,
    TopicQueueConfig,
    TopicRoute,
)


@dataclass
class _Group:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)
    grpc: dict[int, str] = field(default_factory=dict)

    def snapshot(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.addrs), dict(self.grpc))


@dataclass
class _Live:
    reg: BrokerRegistration
    last_update_ms: int  # wall clock, for display
    last_update_s: float  # monotonic, for expiry
    channel_id: int | None

    def public(self) -> BrokerLive:
        r = self.reg
        return BrokerLive(
            cluster=r.cluster,
            broker_name=r.broker_name,
            broker_id=r.broker_id,
            broker_addr=r.broker_addr,
            grpc_addr=r.grpc_addr,
            last_update_ms=self.last_update_ms,
            data_version=r.data_version,
        )


class RouteTable:
    """The route tables and the rules that change them (see the module docstring)."""

    def __init__(
        self,
        *,
        broker_expiry_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_expiry_ms = broker_expiry_ms
        self._clock_s = clock_s
        self._lock = threading.Lock()
        self._topic_queues: dict[str, dict[str, QueueData]] = {}
        self._groups: dict[str, _Group] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[tuple[str, str], _Live] = {}

    # ---- changes ------------------------------------------------------------------------

    def register(self, reg: BrokerRegistration, channel_id: int | None = None) -> RegisterResult:
        """Add or refresh one replica; returns its group's master (for a slave's HA link)."""
        with self._lock:
            group = self._groups.get(reg.broker_name)
            if group is not None:
                self._check_not_stale(group, reg)
            else:
                group = self._groups[reg.broker_name] = _Group(reg.cluster, reg.broker_name)
            self._clusters.setdefault(reg.cluster, set()).add(reg.broker_name)
            self._put_replica(group, reg)
            key = (reg.cluster, reg.broker_addr)
            previous = self._live.get(key)
            if _updates_topics(group, reg.broker_id) and (
                previous is None or previous.reg.data_version != reg.data_version
            ):
                self._replace_queue_data(reg.broker_name, reg.topics)
            self._live[key] = _Live(reg, now_ms(), self._clock_s(), channel_id)
            return self._register_result(group, reg)

    def heartbeat(self, cluster: str, broker_addr: str) -> bool:
        """Refresh a replica's last update; False if it is not registered."""
        with self._lock:
            live = self._live.get((cluster, broker_addr))
            if live is None:
                return False
            live.last_update_ms, live.last_update_s = now_ms(), self._clock_s()
            return True

    def unregister(self, cluster: str, broker_name: str, broker_id: int, broker_addr: str) -> bool:
        """Remove one replica (a broker shutting down); False if it was not registered."""
        with self._lock:
            group = self._groups.get(broker_name)
            if group is None or group.addrs.get(broker_id) != broker_addr:
                self._live.pop((cluster, broker_addr), None)
                return False
            self._remove_replica(cluster, broker_name, broker_addr)
            return True

    def on_channel_closed(self, channel_id: int) -> list[BrokerLive]:
        """Remove every replica that registered over this connection; returns them."""
        with self._lock:
            gone = [v for v in self._live.values() if v.channel_id == channel_id]
            for live in gone:
                self._remove_replica(live.reg.cluster, live.reg.broker_name, live.reg.broker_addr)
            return [live.public() for live in gone]

    def scan_expired(self) -> list[tuple[BrokerLive, int | None]]:
        """Remove replicas silent for longer than their timeout; returns them and channels."""
        now_s = self._clock_s()
        with self._lock:
            gone = [v for v in self._live.values() if self._expired(v, now_s)]
            for live in gone:
                self._remove_replica(live.reg.cluster, live.reg.broker_name, live.reg.broker_addr)
            return [(live.public(), live.channel_id) for live in gone]

    # ---- queries ------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRoute:
        """The topic's route; raises ``TopicNotFoundError`` if no live group serves it."""
        with self._lock:
            queues = self._topic_queues.get(topic, {})
            names = sorted(name for name in queues if name in self._groups)
            if not names:
                raise TopicNotFoundError(f"no route for topic {topic!r} on this NameServer")
            return TopicRoute(
                topic,
                [queues[name] for name in names],
                [self._groups[name].snapshot() for name in names],
            )

    def cluster_info(self) -> ClusterInfo:
        with self._lock:
            return ClusterInfo(
                brokers={name: g.snapshot() for name, g in sorted(self._groups.items())},
                clusters={c: sorted(names) for c, names in sorted(self._clusters.items())},
                live=[v.public() for _, v in sorted(self._live.items())],
            )

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._topic_queues)

    # ---- internals (lock held) ------------------------------------------------------------

    def _check_not_stale(self, group: _Group, reg: BrokerRegistration) -> None:
        old_addr = group.addrs.get(reg.broker_id)
        if old_addr is None or old_addr == reg.broker_addr:
            return
        old = self._live.get((group.cluster, old_addr))
        if old is None:
            return
        old_state, new_state = old.reg.data_version.state_version, reg.data_version.state_version
        if old_state > new_state:
            raise StaleRegistrationError(
                f"broker {reg.broker_name!r} id {reg.broker_id} is held by {old_addr} with "
                f"state version {old_state}; {reg.broker_addr} registered {new_state}: refused"
            )

    def _put_replica(self, group: _Group, reg: BrokerRegistration) -> None:
        for broker_id, addr in list(group.addrs.items()):
            if addr == reg.broker_addr and broker_id != reg.broker_id:
                del group.addrs[broker_id]
                group.grpc.pop(broker_id, None)
        group.addrs[reg.broker_id] = reg.broker_addr
        if reg.grpc_addr:
            group.grpc[reg.broker_id] = reg.grpc_addr
        else:
            group.grpc.pop(reg.broker_id, None)

    def _replace_queue_data(self, broker_name: str, topics: dict[str, TopicQueueConfig]) -> None:
        for topic in list(self._topic_queues):
            if topic not in topics:
                self._drop_group_from_topic(topic, broker_name)
        for topic, cfg in topics.items():
            queue = QueueData(broker_name, cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm)
            self._topic_queues.setdefault(topic, {})[broker_name] = queue

    def _drop_group_from_topic(self, topic: str, broker_name: str) -> None:
        queues = self._topic_queues[topic]
        queues.pop(broker_name, None)
        if not queues:
            del self._topic_queues[topic]

    def _remove_replica(self, cluster: str, broker_name: str, broker_addr: str) -> None:
        self._live.pop((cluster, broker_addr), None)
        group = self._groups.get(broker_name)
        if group is None:
            return
        for broker_id in [i for i, a in group.addrs.items() if a == broker_addr]:
            del group.addrs[broker_id]
            group.grpc.pop(broker_id, None)
        if group.addrs:
            return
        del self._groups[broker_name]
        names = self._clusters.get(group.cluster, set())
        names.discard(broker_name)
        if not names:
            self._clusters.pop(group.cluster, None)
        for topic in list(self._topic_queues):
            self._drop_group_from_topic(topic, broker_name)

    def _expired(self, live: _Live, now_s: float) -> bool:
        timeout_ms = min(live.reg.heartbeat_timeout_ms, self.broker_expiry_ms)
        return live.last_update_s + timeout_ms / 1000 < now_s

    def _register_result(self, group: _Group, reg: BrokerRegistration) -> RegisterResult:
        master_addr = group.addrs.get(MASTER_ID)
        if reg.broker_id == MASTER_ID or master_addr is None:
            return RegisterResult()
        master = self._live.get((group.cluster, master_addr))
        return RegisterResult(master_addr, master.reg.ha_addr if master else "")


def _updates_topics(group: _Group, broker_id: int) -> bool:
    """The master, or the lowest-id slave of a group without a master, owns the queue data."""
    if broker_id == MASTER_ID:
        return True
    return MASTER_ID not in group.addrs and broker_id == min(group.addrs)
