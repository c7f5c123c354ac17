"""Which broker group serves a topic, by the NameServers: the one routing of every client.

:class:`ClusterRouting` asks the NameServers for a topic's broker groups (cached for
``route_ttl_ms``, default 3 s, by :class:`~broker_core.cluster.routes.ClusterRoutes`) and
keeps one :class:`~broker_core.client.broker_client.BrokerClient` per broker address. The
cluster client (``client/cluster.py``), the Spark source (``connector/routes.py``) and the
Spark sink (``connector/sink_route.py``) all route through it. Contract:

* a broker group is known by name and reached at its master's gRPC address;
* :meth:`ClusterRouting.readable` / :meth:`ClusterRouting.writable` are the groups whose
  route entry allows reading / writing (:class:`~broker_core.protocol.perm.Perm`; a
  writable group also has a write queue), sorted by name;
* :meth:`ClusterRouting.for_queue` names the group of a queue (``broker=``), or the
  topic's only group;
* thread-safe; pickles without connections, and a copy in another process (or a fork)
  opens its own on first use.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Final

from broker_core.client.broker_client import BrokerClient
from broker_core.client.settings import ClientSettings
from broker_core.errors import InvalidArgumentError, RocketMQError, TopicNotFoundError
from broker_core.protocol.perm import Perm

if TYPE_CHECKING:  # imported on first use: a single-broker client never loads them
    from broker_core.cluster.routes import BrokerQueues, ClusterRoutes

DEFAULT_ROUTE_TTL_MS: Final = 3_000
DEFAULT_NAMESRV_TIMEOUT_S: Final = 3.0


class ClusterRouting:
    """Routes and per-broker clients of one cluster; see the module docstring."""

    def __init__(
        self,
        namesrv: str,
        settings: ClientSettings,
        *,
        route_ttl_ms: int = DEFAULT_ROUTE_TTL_MS,
        namesrv_timeout_s: float = DEFAULT_NAMESRV_TIMEOUT_S,
        namesrv_tls: bool = True,
    ) -> None:
        """``namesrv_tls``: talk TLS to the NameServers too when ``settings`` ask for TLS
        (False: plain, unless ``RMQ_CA_FILE``/``RMQ_TLS`` say TLS)."""
        if not namesrv or not namesrv.strip():
            raise InvalidArgumentError("namesrv must be HOST:PORT[;HOST:PORT]")
        self.namesrv = namesrv
        self.settings = settings
        self.route_ttl_ms = route_ttl_ms
        self.namesrv_timeout_s = namesrv_timeout_s
        self.tls_files = settings.tls_files if namesrv_tls else None
        self._init_process_state()

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._routes: ClusterRoutes | None = None
        self._clients: dict[str, BrokerClient] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_pid", "_routes", "_clients"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_process_state()

    @property
    def routes(self) -> ClusterRoutes:
        """This process's route cache (made on first use)."""
        from broker_core.cluster.routes import ClusterRoutes
        from broker_core.namesrv.client import NameServerClient
        from broker_core.remoting.tls import client_context

        with self._lock:
            if self._routes is None or self._pid != os.getpid():
                if self._pid != os.getpid():
                    self._clients = {}  # a forked copy never uses its parent's channels
                self._pid = os.getpid()
                context = client_context(*self.tls_files) if self.tls_files else None
                names = NameServerClient(
                    self.namesrv, timeout_s=self.namesrv_timeout_s, ssl_context=context
                )
                self._routes = ClusterRoutes(names, ttl_ms=self.route_ttl_ms)
            return self._routes

    def broker_at(self, addr: str) -> BrokerClient:
        """The client of the broker at ``addr`` (one per address, reused)."""
        _ = self.routes  # resets the per-process state after a fork
        with self._lock:
            client = self._clients.get(addr)
            if client is None:
                client = self._clients[addr] = BrokerClient(addr, self.settings)
            return client

    def brokers(self, topic: str) -> list[BrokerQueues]:
        """The topic's broker groups (TopicNotFoundError when none holds it)."""
        return self.routes.brokers(topic)

    def readable(self, topic: str) -> list[BrokerQueues]:
        """The groups that let ``topic`` be read, by name (empty when none holds it)."""
        try:
            groups = self.brokers(topic)
        except TopicNotFoundError:
            return []
        return [g for g in groups if Perm.readable(g.perm)]

    def writable(self, topic: str) -> list[BrokerQueues]:
        """The groups that take writes to ``topic``, by name (TopicNotFoundError when
        none holds it)."""
        return [g for g in self.brokers(topic) if Perm.writeable(g.perm) and g.write_queue_nums > 0]

    def all_topics(self) -> list[str]:
        """Every topic the NameServers know."""
        return list(self.routes.client.get_all_topics())

    def invalidate(self, topic: str | None = None) -> None:
        """Ask the NameServers again next time (for ``topic``, or for everything)."""
        self.routes.invalidate(topic)

    def first_broker_addr(self) -> str:
        """The gRPC address of the first live broker group (by name)."""
        from broker_core.cluster.routes import master_grpc_addr

        brokers = self.routes.cluster_info().brokers
        for name in sorted(brokers):
            addr = master_grpc_addr(brokers[name])
            if addr:
                return addr
        raise RocketMQError(f"the NameServers at {self.namesrv} list no live broker")

    def for_queue(self, topic: str, broker: str | None) -> BrokerClient:
        """The client of the broker group serving ``topic``'s queues on ``broker``."""
        groups = self.brokers(topic)
        if broker is None:
            if len(groups) != 1:
                raise InvalidArgumentError(
                    f"topic {topic!r} lives on {len(groups)} broker groups "
                    f"({', '.join(g.broker_name for g in groups)}): say which with broker="
                )
            return self.broker_at(groups[0].grpc_addr)
        for group in groups:
            if group.broker_name == broker:
                return self.broker_at(group.grpc_addr)
        raise TopicNotFoundError(
            f"topic {topic!r} has no queues on broker {broker!r} "
            f"(it has: {', '.join(g.broker_name for g in groups)})"
        )

    def opened(self) -> list[BrokerClient]:
        """The broker clients this process opened so far."""
        with self._lock:
            return list(self._clients.values()) if self._pid == os.getpid() else []

    def close(self) -> None:
        """Close every connection of this process (the next call reopens them)."""
        with self._lock:
            clients, self._clients = self._clients, {}
            routes, self._routes = self._routes, None
            mine = self._pid == os.getpid()
        if mine:
            for client in clients.values():
                client.close()
            if routes is not None:
                routes.close()
