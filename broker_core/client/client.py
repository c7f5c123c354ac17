"""A thin synchronous client for our broker: batch send, offset pull, offsets, admin.

What the official ``rocketmq`` client lacks and the Spark connector needs: many messages
in one SendMessage request, offset-based PullMessage of an exact range, the group offset
RPCs, and the admin service. It speaks the same ``apache.rocketmq.v2`` protocol.

Contract:

* **Lazy, per-process channel.** Nothing connects until the first call. The client
  pickles without its channel, and a process that did not create the channel (a forked
  or unpickled copy on a Spark executor) makes its own, so one client object can be
  shipped to executors. ``close()`` drops the channel; the next call reopens one.
* **Errors** are ``broker_core.errors`` classes, from the response's status code
  (``errors.error_for``); an unreachable broker is ``BrokerUnavailableError``.
* **Retries.** Retriable errors (busy broker, broker unreachable, flush timeout) are
  retried up to ``max_attempts`` times with exponential backoff from ``retry_backoff_s``
  (capped at 2 s). A retried send resends the same message ids, so a send whose answer
  was lost may store a message twice (at least once); reads and offset calls are
  idempotent.
* **Threads.** A client may be shared between threads (gRPC channels are thread-safe).
* **Any RocketMQ 5 endpoint.** Our own services (admin, bulk) are used when the broker
  offers them; an endpoint that answers UNIMPLEMENTED is remembered (per endpoint and
  process) and served by the standard ``apache.rocketmq.v2`` RPCs instead where the
  protocol has them (``client/standard.py``), else the call raises UnsupportedError.
* **Coalescing** (``coalesce=True``, off by default): ``send`` calls made at the same
  time by several threads share SendMessage requests, Kafka-style with no linger
  (``client/coalesce.py``); each caller still gets its own receipt or error.
* **Clusters.** ``RocketMQClient(namesrv="h:p")`` routes each queue to the broker group
  that owns it: queue calls take ``broker=NAME``, sends rotate over the topic's broker
  groups (see ``client/cluster.py``); ``endpoints`` alone is one broker, as always.

The client is a facade over composed parts (``client/broker_client.py``): one endpoint
is a :class:`BrokerClient` (a transport, and the producer, puller, offsets and admin
objects it holds); a cluster is a :class:`ClusterClient` routing over broker clients by
the NameServers (``client/cluster.py``, ``client/routing.py``). Each public method here is
the bound method of the part that serves it (no wrapper in between): sends, pulls and
offsets from the cluster client or the endpoint's parts, admin calls from the endpoint
given (a cluster without one: its first live broker).

Example (needs a running broker)::

    with RocketMQClient("127.0.0.1:8081") as client:
        client.create_topic("orders", queues=4)
        receipts = client.send_batch("orders", [(b"hello", "TagA"), (b"world",)])
        batch = client.pull("GID_reader", "orders", 0, 0, 32)
        client.update_offset("GID_reader", "orders", 0, batch.next_offset)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from broker_core.client.admin_auth import AuthAdminCalls
from broker_core.client.broker_client import BrokerClient
from broker_core.client.cluster import ClusterClient
from broker_core.client.in_flight import DEFAULT_MAX_IN_FLIGHT
from broker_core.client.offsets import Offsets
from broker_core.client.producing import Producer
from broker_core.client.pulling import Puller
from broker_core.client.routing import ClusterRouting
from broker_core.client.settings import ClientSettings, parse_endpoint
from broker_core.client.transport import Transport
from broker_core.errors import InvalidArgumentError

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["RocketMQClient", "parse_endpoint"]


class _Via(Generic[P, R]):
    """A facade method: the same-named bound method of the part ``part`` (an attribute or
    property of the facade) names. Its signature and docstring are ``method``'s."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = method.__name__
        self.__doc__ = method.__doc__

    def __get__(self, client: object, owner: type | None = None) -> Callable[P, R]:
        bound: Callable[P, R] = getattr(getattr(client, self.part), self.name)
        return bound


def _via(part: str, method: Callable[Concatenate[Any, P], R]) -> _Via[P, R]:
    return _Via(part, method)


class RocketMQClient:
    """One broker endpoint, or a cluster; see the module docstring for the contract."""

    def __init__(
        self,
        endpoints: str | None = None,
        *,
        namesrv: str | None = None,
        timeout_s: float = 10.0,
        client_id: str | None = None,
        max_attempts: int = 3,
        retry_backoff_s: float = 0.1,
        namespace: str = "",
        access_key: str | None = None,
        secret_key: str | None = None,
        tls: bool = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        bulk: bool = True,
        coalesce: bool = False,
    ) -> None:
        settings = ClientSettings(
            timeout_s=timeout_s,
            client_id=client_id,
            max_attempts=max_attempts,
            retry_backoff_s=retry_backoff_s,
            namespace=namespace,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            max_in_flight=max_in_flight,
            bulk=bulk,
            coalesce=coalesce,
        )
        if endpoints is None and namesrv is None:
            raise InvalidArgumentError("give endpoints (one broker) or namesrv (a cluster)")
        broker = BrokerClient(parse_endpoint(endpoints), settings) if endpoints else None
        cluster = None if namesrv is None else ClusterClient(ClusterRouting(namesrv, settings))
        self._init(settings, broker, cluster)

    def _init(
        self, settings: ClientSettings, broker: BrokerClient | None, cluster: ClusterClient | None
    ) -> None:
        self.settings = settings
        self.broker = broker  # the endpoint given (admin calls go there)
        self.cluster = cluster
        self._lock = threading.Lock()
        queues: Any = cluster if cluster is not None else broker
        self._sender: ClusterClient | Producer = queues if cluster else queues.producer
        self._puller: ClusterClient | Puller = queues if cluster else queues.puller
        self._offsets: ClusterClient | Offsets = queues if cluster else queues.offsets

    @classmethod
    def of(cls, broker: BrokerClient) -> RocketMQClient:
        """The facade of an existing broker client (it shares its parts and channel)."""
        client = cls.__new__(cls)
        client._init(broker.settings, broker, None)
        return client

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "broker": self.broker, "cluster": self.cluster}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._init(state["settings"], state["broker"], state["cluster"])

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.cluster is not None:
            return f"RocketMQClient(namesrv={self.cluster.namesrv!r})"
        return f"RocketMQClient({self.endpoint!r})"

    # ---- the endpoint: the one given, or a cluster's first live broker -----------------

    @property
    def endpoint_client(self) -> BrokerClient:
        """The broker client of admin calls (made on first use for a cluster alone)."""
        broker = self.broker
        if broker is None:
            assert self.cluster is not None
            with self._lock:
                if self.broker is None:
                    routing = self.cluster.routing
                    self.broker = routing.broker_at(routing.first_broker_addr())
                broker = self.broker
        return broker

    @property
    def endpoint(self) -> str:
        """``host:port`` of the endpoint given ("" for a cluster alone, until an admin
        call picked a broker)."""
        return self.broker.endpoint if self.broker is not None else ""

    @property
    def _transport(self) -> Transport:
        return self.endpoint_client.transport

    @property
    def _admin_calls(self) -> AuthAdminCalls:
        return self.endpoint_client.admin

    @property
    def client_id(self) -> str:
        """The given id, else one made per process (``host@pid@random``)."""
        return self._transport.client_id

    @property
    def stub(self) -> Any:
        """The ``MessagingService`` stub of the endpoint's channel."""
        return self._transport.stub

    @property
    def coalescer(self) -> Any:
        """The endpoint's coalescer of single sends (None unless ``coalesce=True``)."""
        return self.broker.producer.coalescer if self.broker is not None else None

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    @property
    def timeout_s(self) -> float:
        return self.settings.timeout_s

    call = _via("_transport", Transport.call)

    # ---- sends, pulls, offsets: the cluster's routing or the endpoint's parts ------------

    send = _via("_sender", Producer.send)
    send_batch = _via("_sender", Producer.send_batch)
    send_columns = _via("_sender", Producer.send_columns)
    send_batch_async = _via("_sender", Producer.send_batch_async)
    send_columns_async = _via("_sender", Producer.send_columns_async)
    flush = _via("_sender", Producer.flush)
    pull = _via("_puller", Puller.pull)
    pull_raw = _via("_puller", Puller.pull_raw)
    pull_columns = _via("_puller", Puller.pull_columns)
    query_route = _via("_offsets", Offsets.query_route)
    get_offset = _via("_offsets", Offsets.get_offset)
    update_offset = _via("_offsets", Offsets.update_offset)
    query_offset = _via("_offsets", Offsets.query_offset)

    # ---- admin: the endpoint's admin service ---------------------------------------------

    topic_status = _via("endpoint_client", BrokerClient.topic_status)
    broker_name = _via("endpoint_client", BrokerClient.broker_name)
    health = _via("_admin_calls", AuthAdminCalls.health)
    create_topic = _via("_admin_calls", AuthAdminCalls.create_topic)
    list_topics = _via("_admin_calls", AuthAdminCalls.list_topics)
    delete_topic = _via("_admin_calls", AuthAdminCalls.delete_topic)
    create_group = _via("_admin_calls", AuthAdminCalls.create_group)
    list_groups = _via("_admin_calls", AuthAdminCalls.list_groups)
    broker_config = _via("_admin_calls", AuthAdminCalls.broker_config)
    update_broker_config = _via("_admin_calls", AuthAdminCalls.update_broker_config)
    delete_group = _via("_admin_calls", AuthAdminCalls.delete_group)
    group_progress = _via("_admin_calls", AuthAdminCalls.group_progress)
    resend_message = _via("_admin_calls", AuthAdminCalls.resend_message)
    query_message = _via("_admin_calls", AuthAdminCalls.query_message)
    lock_queues = _via("_admin_calls", AuthAdminCalls.lock_queues)
    unlock_queues = _via("_admin_calls", AuthAdminCalls.unlock_queues)
    reset_offset = _via("_admin_calls", AuthAdminCalls.reset_offset)
    create_user = _via("_admin_calls", AuthAdminCalls.create_user)
    delete_user = _via("_admin_calls", AuthAdminCalls.delete_user)
    list_users = _via("_admin_calls", AuthAdminCalls.list_users)
    create_acl = _via("_admin_calls", AuthAdminCalls.create_acl)
    delete_acl = _via("_admin_calls", AuthAdminCalls.delete_acl)
    list_acls = _via("_admin_calls", AuthAdminCalls.list_acls)

    def broker_clients(self, topic: str) -> dict[str, RocketMQClient]:
        """Broker group name -> a single-broker client of it, for every group holding
        ``topic`` (TopicNotFoundError when none does). A single-broker client answers
        ``{its broker's name: itself}``. The clients belong to this one: do not close them."""
        if self.cluster is None:
            queues = self.query_route(topic)
            return {queues[0].broker_name: self} if queues else {}
        routing = self.cluster.routing
        return {
            g.broker_name: RocketMQClient.of(routing.broker_at(g.grpc_addr))
            for g in routing.brokers(topic)
        }

    def close(self) -> None:
        """Finish the send requests in flight (raising the first error among them), then
        close this process's channels (idempotent); later calls open new ones."""
        try:
            if self.broker is not None:
                self.broker.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()
