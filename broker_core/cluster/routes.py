"""A short-lived cache of the NameServers' route table, for a broker or a client.

RocketMQ's proxy caches routes (refresh after 20 s); we keep them ``ttl_ms`` (default
3 s) so a broker that left the cluster leaves the answers within seconds, and a lookup
on the send path is a dict access. Contract:

* ``brokers(topic)`` is the topic's broker groups from the first NameServer that
  answers, cached for ``ttl_ms``; an unknown topic raises ``TopicNotFoundError`` and no
  answering NameServer raises its error (both cached for ``miss_ttl_ms``, shorter, so a
  topic created a moment ago shows soon and a dead NameServer is not asked per call).
* ``grpc_addr(broker_name)`` is that broker group's master gRPC address from the
  cluster table (cached the same way), or None when no live broker has that name.
* Only :class:`BrokerData` whose broker is registered with a gRPC address count; a
  route whose brokers all left is answered as TOPIC_NOT_FOUND.
* Thread-safe; a refresh holds no lock while it waits on the network.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.errors import RocketMQError, TopicNotFoundError
from broker_core.namesrv.client import BrokerData, ClusterInfo, NameServerClient, TopicRoute

log = logging.getLogger(__name__)
MASTER_ID = 0
DEFAULT_ROUTE_TTL_MS = 3_000
DEFAULT_MISS_TTL_MS = 500


@dataclass(frozen=True)
class BrokerQueues:
    """One broker group's share of a topic: its name, gRPC address (the master's) and queue
    counts; ``group_addrs`` is every registered member's gRPC address, master first."""

    broker_name: str
    grpc_addr: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    group_addrs: tuple[str, ...] = ()


def master_grpc_addr(data: BrokerData) -> str | None:
    """The master's gRPC address of a broker group (None when it has none)."""
    return data.grpc_addrs.get(MASTER_ID)


def group_grpc_addrs(data: BrokerData) -> tuple[str, ...]:
    """Every member's gRPC address of a broker group, by broker id (the master first)."""
    return tuple(addr for _, addr in sorted(data.grpc_addrs.items()))


def brokers_of(route: TopicRoute) -> list[BrokerQueues]:
    """Every broker group of ``route`` that has a live master, sorted by name (pure)."""
    addrs = {b.broker_name: master_grpc_addr(b) for b in route.broker_datas}
    members = {b.broker_name: group_grpc_addrs(b) for b in route.broker_datas}
    out = []
    for q in route.queue_datas:
        addr = addrs.get(q.broker_name)
        if addr:
            out.append(
                BrokerQueues(
                    q.broker_name,
                    addr,
                    q.read_queue_nums,
                    q.write_queue_nums,
                    q.perm,
                    members.get(q.broker_name, ()),
                )
            )
    return sorted(out, key=lambda b: b.broker_name)


class ClusterRoutes:
    """Cached routes and broker addresses; see the module docstring."""

    def __init__(
        self,
        client: NameServerClient,
        *,
        ttl_ms: int = DEFAULT_ROUTE_TTL_MS,
        miss_ttl_ms: int = DEFAULT_MISS_TTL_MS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl_s = ttl_ms / 1000
        self.miss_ttl_s = miss_ttl_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[float, list[BrokerQueues] | RocketMQError]] = {}
        self._cluster: tuple[float, ClusterInfo] | None = None

    def brokers(self, topic: str) -> list[BrokerQueues]:
        """The topic's broker groups (TopicNotFoundError when none has it; the NameServers'
        error, also cached for ``miss_ttl_ms``, when none answers)."""
        now = self._clock()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is None or cached[0] <= now:
            found: list[BrokerQueues] | RocketMQError
            try:
                found = brokers_of(self.client.get_route(topic)) or TopicNotFoundError(
                    f"topic {topic!r} does not exist on any live broker of the cluster"
                )
            except TopicNotFoundError as exc:
                found = exc
            except RocketMQError as exc:  # no NameServer answered: do not ask at every call
                log.warning("no NameServer answered the route of %s: %s", topic, exc)
                found = exc
            expires = now + (self.miss_ttl_s if isinstance(found, RocketMQError) else self.ttl_s)
            with self._lock:
                self._routes[topic] = cached = (expires, found)
        if isinstance(cached[1], RocketMQError):
            raise cached[1].with_traceback(None)
        return cached[1]

    def cluster_info(self) -> ClusterInfo:
        """The NameServers' cluster table (cached for ``ttl_ms``)."""
        now = self._clock()
        with self._lock:
            cached = self._cluster
        if cached is None or cached[0] <= now:
            cached = (now + self.ttl_s, self.client.get_cluster_info())
            with self._lock:
                self._cluster = cached
        return cached[1]

    def grpc_addr(self, broker_name: str) -> str | None:
        """The master gRPC address of broker group ``broker_name``, or None."""
        data = self.cluster_info().brokers.get(broker_name)
        return master_grpc_addr(data) if data is not None else None

    def invalidate(self, topic: str | None = None) -> None:
        """Forget a topic's cached route (every cached answer when ``topic`` is None)."""
        with self._lock:
            if topic is None:
                self._routes.clear()
                self._cluster = None
            else:
                self._routes.pop(topic, None)

    def close(self) -> None:
        self.client.close()
