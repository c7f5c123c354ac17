"""Per-queue routing of :class:`RocketMQClient` over a cluster (``namesrv=``).

A client made with ``namesrv="h:p;h:p"`` asks the NameServers which broker groups hold
a topic (cached for ``route_ttl_ms``, default 3 s) and keeps one single-broker client
per broker address. Contract:

* **Queue calls** (pull, pull_raw, offsets) take ``broker=NAME``: a queue is (broker,
  queue id). Without ``broker`` they go to the topic's only broker group, and raise
  InvalidArgumentError naming the groups when there are several.
* **Sends** rotate over the broker groups with writable queues, one request per group
  in turn; a group that cannot be reached is skipped (routes are refreshed and the next
  group gets the request). A topic no group has yet goes to one live broker, whose
  auto-creation (a broker setting) decides. Messages with a message group (FIFO) are
  pinned: each group's messages go to the broker group its hash picks among the
  writable ones (sorted by name), the same one as long as those stay the same, and the
  broker pins it to one queue; that group not being reachable is an error, never a
  silent move. A batch that spans broker groups is one request per group (each stored
  whole or not at all; not atomic across groups).
* **Admin calls** (topics, groups, queries) go to one broker: the ``endpoints`` given,
  else the first live broker of the cluster.
* Pickles without connections; a copy in another process reconnects on first use.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from broker_core.errors import InvalidArgumentError, RocketMQError, TopicNotFoundError

if TYPE_CHECKING:  # imported on first use: a single-broker client never loads them
    from broker_core.client.client import RocketMQClient
    from broker_core.cluster.routes import BrokerQueues, ClusterRoutes

T = TypeVar("T")
PERM_WRITE: Final = 2
DEFAULT_ROUTE_TTL_MS: Final = 3_000
F = TypeVar("F", bound=Callable[..., Any])


def routed(topic_index: int) -> Callable[[F], F]:
    """A per-queue method that, on a cluster client, runs on the broker group named by its
    ``broker=`` keyword (the topic is positional argument ``topic_index``); a
    single-broker client ignores ``broker`` (the method never sees it)."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(self: Any, *args: Any, broker: str | None = None, **kwargs: Any) -> Any:
            if self.cluster is None:
                return method(self, *args, **kwargs)
            topic = args[topic_index] if len(args) > topic_index else kwargs["topic"]
            return getattr(self.cluster.for_queue(topic, broker), method.__name__)(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


class ClusterRouting:
    """Routes and per-broker clients of one cluster client; see the module docstring."""

    def __init__(
        self,
        namesrv: str,
        make_client: Callable[[str], RocketMQClient],
        *,
        route_ttl_ms: int = DEFAULT_ROUTE_TTL_MS,
        tls_files: tuple[str | None, str | None, str | None] | None = None,
    ) -> None:
        """``tls_files`` (CA, client certificate, client key; None each = none): talk
        TLS to the NameServers too; None: plain, unless ``RMQ_CA_FILE``/``RMQ_TLS`` say TLS."""
        self.tls_files = tls_files
        if not namesrv or not namesrv.strip():
            raise InvalidArgumentError("namesrv must be HOST:PORT[;HOST:PORT]")
        self.namesrv = namesrv
        self.route_ttl_ms = route_ttl_ms
        self._make_client = make_client
        self._init_process_state()

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._routes: ClusterRoutes | None = None
        self._clients: dict[str, RocketMQClient] = {}
        self._turn = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "namesrv": self.namesrv,
            "route_ttl_ms": self.route_ttl_ms,
            "_make_client": self._make_client,
            "tls_files": self.tls_files,
        }

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
                self._routes = ClusterRoutes(
                    NameServerClient(self.namesrv, ssl_context=context), ttl_ms=self.route_ttl_ms
                )
            return self._routes

    def client_at(self, addr: str) -> RocketMQClient:
        """The single-broker client of ``addr`` (one per address, reused)."""
        _ = self.routes  # resets the per-process state after a fork
        with self._lock:
            client = self._clients.get(addr)
            if client is None:
                client = self._clients[addr] = self._make_client(addr)
            return client

    def brokers(self, topic: str) -> list[BrokerQueues]:
        """The topic's broker groups (TopicNotFoundError when none holds it)."""
        return self.routes.brokers(topic)

    def first_broker_addr(self) -> str:
        """The gRPC address of the first live broker group (by name)."""
        from broker_core.cluster.routes import master_grpc_addr

        brokers = self.routes.cluster_info().brokers
        for name in sorted(brokers):
            addr = master_grpc_addr(brokers[name])
            if addr:
                return addr
        raise RocketMQError(f"the NameServers at {self.namesrv} list no live broker")

    def for_queue(self, topic: str, broker: str | None) -> RocketMQClient:
        """The client of the broker group serving ``topic``'s queues on ``broker``."""
        groups = self.brokers(topic)
        if broker is None:
            if len(groups) != 1:
                raise InvalidArgumentError(
                    f"topic {topic!r} lives on {len(groups)} broker groups "
                    f"({', '.join(g.broker_name for g in groups)}): say which with broker="
                )
            return self.client_at(groups[0].grpc_addr)
        for group in groups:
            if group.broker_name == broker:
                return self.client_at(group.grpc_addr)
        raise TopicNotFoundError(
            f"topic {topic!r} has no queues on broker {broker!r} "
            f"(it has: {', '.join(g.broker_name for g in groups)})"
        )

    def send(self, topic: str, attempt: Callable[[RocketMQClient], T]) -> T:
        """Run ``attempt(client)`` on the next writable broker group of ``topic``,
        moving on to the following groups while one is unreachable."""
        try:
            groups = [g for g in self.brokers(topic) if g.perm & PERM_WRITE]
        except TopicNotFoundError:
            return attempt(self.client_at(self.first_broker_addr()))
        if not groups:
            raise InvalidArgumentError(f"topic {topic!r} has no writable queue in the cluster")
        start = next(self._turn)
        last: RocketMQError | None = None
        for i in range(len(groups)):
            group = groups[(start + i) % len(groups)]
            try:
                return attempt(self.client_at(group.grpc_addr))
            except RocketMQError as exc:
                if not exc.retriable:
                    raise
                last = exc
                self.routes.invalidate(topic)
        assert last is not None
        raise last

    def send_split(
        self,
        topic: str,
        message_groups: Sequence[str | None],
        attempt: Callable[[RocketMQClient, list[int]], list[T]],
    ) -> list[T]:
        """``attempt(client, indexes)`` per broker group for the messages at ``indexes``:
        those with a message group on the group its hash pins, the others together on the
        next group in turn (with :meth:`send`'s fail-over); results in message order."""
        try:
            groups = sorted(
                (g for g in self.brokers(topic) if g.perm & PERM_WRITE), key=lambda g: g.broker_name
            )
        except TopicNotFoundError:
            everything = list(range(len(message_groups)))
            return attempt(self.client_at(self.first_broker_addr()), everything)
        if not groups:
            raise InvalidArgumentError(f"topic {topic!r} has no writable queue in the cluster")
        parts: dict[str, list[int]] = {}
        free: list[int] = []
        for i, group in enumerate(message_groups):
            if group is None:
                free.append(i)
            else:
                pinned = groups[zlib.crc32(group.encode()) % len(groups)].grpc_addr
                parts.setdefault(pinned, []).append(i)
        results: list[T | None] = [None] * len(message_groups)
        for addr, indexes in parts.items():
            for i, result in zip(indexes, attempt(self.client_at(addr), indexes), strict=True):
                results[i] = result
        if free:
            for i, result in zip(free, self.send(topic, lambda c: attempt(c, free)), strict=True):
                results[i] = result
        return results  # type: ignore[return-value]  # every index was filled above

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
