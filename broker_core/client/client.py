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

The client is one class built from one module per call family: ``transport``
(channel, metadata, retries), ``producing`` (sends), ``offsets`` (routes and offsets),
``pulling`` (pulls), ``admin``/``admin_auth`` (the admin service).

Example (needs a running broker)::

    with RocketMQClient("127.0.0.1:8081") as client:
        client.create_topic("orders", queues=4)
        receipts = client.send_batch("orders", [(b"hello", "TagA"), (b"world",)])
        batch = client.pull("GID_reader", "orders", 0, 0, 32)
        client.update_offset("GID_reader", "orders", 0, batch.next_offset)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from typing import Any

from broker_core.address import parse_host_port
from broker_core.client import standard
from broker_core.client.admin import AdminCalls
from broker_core.client.admin_auth import AuthAdminCalls
from broker_core.client.cluster import ClusterRouting
from broker_core.client.coalesce import Coalescer
from broker_core.client.in_flight import DEFAULT_MAX_IN_FLIGHT, SendWindow
from broker_core.client.producing import AsyncSends
from broker_core.client.pulling import PullCalls
from broker_core.errors import InvalidArgumentError


def parse_endpoint(endpoints: str) -> str:
    """``host:port`` from ``"host:port"`` (a ``;``/``,`` list uses its first entry)."""
    first = endpoints.replace(",", ";").split(";")[0].strip()
    for prefix in ("http://", "https://", "dns:///", "ipv4:"):
        first = first.removeprefix(prefix)
    parse_host_port(first, what=f"endpoint {endpoints!r}")  # port 1..65535, else raises
    return first


class RocketMQClient(PullCalls, AsyncSends, AuthAdminCalls):
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
        if timeout_s <= 0 or max_attempts < 1 or retry_backoff_s < 0 or max_in_flight < 1:
            raise InvalidArgumentError(
                "timeout_s > 0, max_attempts >= 1, retry_backoff_s >= 0, max_in_flight >= 1"
            )
        if endpoints is None and namesrv is None:
            raise InvalidArgumentError("give endpoints (one broker) or namesrv (a cluster)")
        if bool(access_key) != bool(secret_key):
            raise InvalidArgumentError("give both access_key and secret_key, or neither")
        self.access_key = access_key or None
        self._secret_key = secret_key or None  # signs requests; never shown (see __repr__)
        self.tls = tls or ca_file is not None or cert_file is not None
        self.ca_file = ca_file
        self.cert_file, self.key_file = cert_file, key_file  # a client certificate (mTLS)
        self.endpoint = parse_endpoint(endpoints) if endpoints is not None else ""
        self.cluster = (
            None
            if namesrv is None
            else ClusterRouting(
                namesrv,
                functools.partial(
                    RocketMQClient,
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
                ),
                tls_files=(ca_file, cert_file, key_file) if self.tls else None,
            )
        )
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.namespace = namespace
        self._given_client_id = client_id
        self._generated_id: tuple[int, str] | None = None  # (pid, id) made in that process
        self._lock = threading.Lock()
        self._channel, self._stub = None, None
        self._raw_methods = {}  # per channel, like _stub
        self._owner_pid = -1
        self.max_in_flight = max_in_flight
        self.bulk = bulk  # plain batches go by SendBulk when the broker offers it
        self._bulk_offered: bool | None = None  # None: not asked yet
        self._window = SendWindow(max_in_flight, lambda: self.endpoint)
        # single sends of several threads share requests (client/coalesce.py)
        self.coalescer = Coalescer() if coalesce else None

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.cluster is not None:
            return f"RocketMQClient(namesrv={self.cluster.namesrv!r})"
        return f"RocketMQClient({self.endpoint!r})"

    def topic_status(self, name: str) -> list[dict[str, Any]]:
        """Per read queue: ``queue_id``, ``min_offset``, ``max_offset`` (by the admin
        service, or by QueryRoute and QueryOffset on a standard endpoint)."""
        return self._extended(
            lambda: AdminCalls.topic_status(self, name),
            lambda: list(standard.topic_status(self, name)),
        )

    def broker_name(self, topics: Iterable[str] = ()) -> str:
        """The name of the broker at this endpoint (admin Health; on a standard endpoint
        the route of the first of ``topics`` that exists there)."""
        names = list(topics)
        return self._extended(
            lambda: str(self.health()["broker_name"]),
            lambda: standard.broker_name(self, names),
        )

    def broker_clients(self, topic: str) -> dict[str, RocketMQClient]:
        """Broker group name -> a single-broker client of it, for every group holding
        ``topic`` (TopicNotFoundError when none does). A single-broker client answers
        ``{its broker's name: itself}``. The clients belong to this one: do not close them."""
        if self.cluster is None:
            queues = self.query_route(topic)
            return {queues[0].broker_name: self} if queues else {}
        return {
            g.broker_name: self.cluster.client_at(g.grpc_addr) for g in self.cluster.brokers(topic)
        }
