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
* **Clusters.** ``RocketMQClient(namesrv="h:p")`` routes each queue to the broker group
  that owns it: queue calls take ``broker=NAME``, sends rotate over the topic's broker
  groups (see ``client/cluster.py``); ``endpoints`` alone is one broker, as always.

Example (needs a running broker)::

    with RocketMQClient("127.0.0.1:8081") as client:
        client.create_topic("orders", queues=4)
        receipts = client.send_batch("orders", [(b"hello", "TagA"), (b"world",)])
        batch = client.pull("GID_reader", "orders", 0, 0, 32)
        client.update_offset("GID_reader", "orders", 0, batch.next_offset)
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.address import parse_host_port
from broker_core.auth.signature import signed_metadata
from broker_core.auth.tls import channel_credentials
from broker_core.client import convert, standard
from broker_core.client.admin import (
    ADMIN_SERVICE,
    AdminCalls,
    decode_response,
    encode_request,
)
from broker_core.client.admin_auth import AuthAdminCalls
from broker_core.client.cluster import ClusterRouting
from broker_core.client.columnar import ColumnBatch, check_placement, decode_units
from broker_core.client.errors import check, transport_error
from broker_core.client.in_flight import (
    DEFAULT_MAX_IN_FLIGHT,
    SendWindow,
)
from broker_core.client.model import (
    OutgoingMessage,
    PullBatch,
    QueueInfo,
    RawPullBatch,
    ReceivedMessage,
    SendReceipt,
)
from broker_core.client.producing import AsyncSends
from broker_core.client.raw import RAW_PULL_METHOD, decode_raw_pull
from broker_core.errors import (
    InvalidArgumentError,
    InvalidOffsetError,
    RocketMQError,
    ServiceNotOfferedError,
)

T = TypeVar("T")

CLIENT_VERSION: Final = "broker_core-0.1.0"
MAX_MESSAGE_BYTES: Final = 256 << 20
MAX_BACKOFF_S: Final = 2.0
QUERY_POLICIES: Final = {
    "BEGINNING": pb.QueryOffsetPolicy.BEGINNING,
    "END": pb.QueryOffsetPolicy.END,
    "TIMESTAMP": pb.QueryOffsetPolicy.TIMESTAMP,
}
FILTER_TYPES: Final = {"TAG": pb.FilterType.TAG, "SQL": pb.FilterType.SQL}
_SERVICE: Final = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
F = TypeVar("F", bound=Callable[..., Any])


def routed(topic_index: int) -> Callable[[F], F]:
    """A per-queue method that, on a cluster client, runs on the broker group named by its
    ``broker=`` keyword (the topic is positional argument ``topic_index``); a
    single-broker client ignores ``broker`` (the method never sees it)."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(self: RocketMQClient, *args: Any, broker: str | None = None, **kwargs: Any) -> Any:
            if self.cluster is None:
                return method(self, *args, **kwargs)
            topic = args[topic_index] if len(args) > topic_index else kwargs["topic"]
            return getattr(self.cluster.for_queue(topic, broker), method.__name__)(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def parse_endpoint(endpoints: str) -> str:
    """``host:port`` from ``"host:port"`` (a ``;``/``,`` list uses its first entry)."""
    first = endpoints.replace(",", ";").split(";")[0].strip()
    for prefix in ("http://", "https://", "dns:///", "ipv4:"):
        first = first.removeprefix(prefix)
    parse_host_port(first, what=f"endpoint {endpoints!r}")  # port 1..65535, else raises
    return first


def _picker(indexes: list[int]) -> Callable[[Sequence[T] | None], list[T] | None]:
    """``pick(column)``: the column's items at ``indexes`` (None stays None)."""

    def pick(column: Sequence[T] | None) -> list[T] | None:
        return None if column is None else [column[i] for i in indexes]

    return pick


class RocketMQClient(AsyncSends, AuthAdminCalls):
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
        self._channel: grpc.Channel | None = None
        self._stub: service_pb2_grpc.MessagingServiceStub | None = None
        self._raw_methods: dict[str, grpc.UnaryUnaryMultiCallable] = {}  # per channel, like _stub
        self._owner_pid = -1
        self.max_in_flight = max_in_flight
        self.bulk = bulk  # plain batches go by SendBulk when the broker offers it
        self._bulk_offered: bool | None = None  # None: not asked yet
        self._window = SendWindow(max_in_flight, lambda: self.endpoint)

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """The given id, else one made per process (``host@pid@random``)."""
        if self._given_client_id:
            return self._given_client_id
        pid = os.getpid()
        if self._generated_id is None or self._generated_id[0] != pid:
            self._generated_id = (pid, f"{socket.gethostname()}@{pid}@{uuid.uuid4().hex[:8]}")
        return self._generated_id[1]

    def _channel_for_process(self) -> grpc.Channel:
        if not self.endpoint and self.cluster is not None:  # admin calls: any live broker
            self.endpoint = self.cluster.first_broker_addr()
        with self._lock:
            if self._channel is None or self._owner_pid != os.getpid():
                # A channel made by another process (fork) is never used nor closed here.
                options = [
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ]
                self._channel = (
                    grpc.secure_channel(
                        self.endpoint,
                        channel_credentials(self.ca_file, self.cert_file, self.key_file),
                        options,
                    )
                    if self.tls
                    else grpc.insecure_channel(self.endpoint, options)
                )
                self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)
                self._raw_methods = {}
                self._owner_pid = os.getpid()
            return self._channel

    @property
    def stub(self) -> service_pb2_grpc.MessagingServiceStub:
        """The ``MessagingService`` stub of this process's channel."""
        self._channel_for_process()
        return self._stub

    def close(self) -> None:
        """Finish the send requests in flight (raising the first error among them), then
        close this process's channel (idempotent); later calls open a new one."""
        try:
            if self._owner_pid == os.getpid():
                self._window.flush()
        finally:
            self._close_channel()

    def _close_channel(self) -> None:
        with self._lock:
            if self._channel is not None and self._owner_pid == os.getpid():
                self._channel.close()
            self._channel, self._stub, self._owner_pid = None, None, -1
            self._raw_methods = {}
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> RocketMQClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_channel", "_stub", "_raw_methods", "_window"):
            state.pop(name, None)
        state["_owner_pid"] = -1
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._channel, self._stub = None, None
        self._raw_methods = {}
        self._window = SendWindow(self.max_in_flight, lambda: self.endpoint)

    def __repr__(self) -> str:
        if self.cluster is not None:
            return f"RocketMQClient(namesrv={self.cluster.namesrv!r})"
        return f"RocketMQClient({self.endpoint!r})"

    # ---- plumbing --------------------------------------------------------------------------

    def _metadata(self) -> list[tuple[str, str]]:
        """Every request's headers; signed (``MQv2-HMAC-SHA1``, UTC stamp) given keys."""
        headers = [
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-request-id", uuid.uuid4().hex),
            ("x-mq-namespace", self.namespace),
        ]
        if self.access_key and self._secret_key:
            headers += signed_metadata(self.access_key, self._secret_key)
        return headers

    def _retrying(self, what: str, attempt: Callable[[], T], *, attempts: int | None = None) -> T:
        """Run ``attempt`` until it succeeds, fails for good, or ``attempts`` (default
        ``max_attempts``, at least 1) run out."""
        attempts = self.max_attempts if attempts is None else attempts
        for number in range(1, attempts + 1):
            try:
                try:
                    return attempt()
                except grpc.RpcError as exc:
                    raise transport_error(exc, self.endpoint, what) from None
            except RocketMQError as exc:
                if not exc.retriable or number >= attempts:
                    raise
                time.sleep(min(MAX_BACKOFF_S, self.retry_backoff_s * 2 ** (number - 1)))
        raise AssertionError("unreachable")  # the loop always returns or raises

    def call(
        self, method: str, request: ProtoMessage | bytes, *, timeout_s: float | None = None
    ) -> ProtoMessage:
        """Call any unary ``MessagingService`` RPC; raise our error unless its status is OK.

        The escape hatch for requests this client has no method for (built with the
        ``rocketmq.grpc_protocol`` stubs, e.g. a transactional SendMessage): it brings
        this client's channel, metadata, retries and error mapping. ``request`` may also
        be the request already serialized (bytes, e.g. from ``wire``): it is sent as is.
        """

        def attempt() -> ProtoMessage:
            send = (
                self._raw_method(method)
                if isinstance(request, bytes)
                else getattr(self.stub, method)
            )
            response = send(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata())
            check(response.status)
            return response

        return self._retrying(method, attempt)

    def _raw_method(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        """``MessagingService/method`` of this process's channel, taking serialized requests."""
        channel = self._channel_for_process()
        raw = self._raw_methods.get(method)
        if raw is None:
            output = _SERVICE.methods_by_name[method].output_type.name
            raw = channel.unary_unary(
                f"/{_SERVICE.full_name}/{method}",
                request_serializer=None,
                response_deserializer=getattr(service_pb2, output).FromString,
            )
            self._raw_methods[method] = raw
        return raw

    def _admin(self, method: str, payload: Mapping[str, Any]) -> Any:
        # Raw bytes in and out: an error raised inside a (de)serializer would reach us as
        # a bare gRPC INTERNAL instead of the broker's status.
        call = self._channel_for_process().unary_unary(f"/{ADMIN_SERVICE}/{method}")
        if standard.is_standard(self.endpoint):
            raise standard.no_standard_rpc(method, self.endpoint)
        request = encode_request(payload)
        try:
            return self._retrying(
                method,
                lambda: decode_response(
                    call(request, timeout=self.timeout_s, metadata=self._metadata())
                ),
            )
        except ServiceNotOfferedError:
            if method != "Health" and self._admin_offered():
                raise  # the admin service is there, only this method is not
            standard.mark_standard(self.endpoint)
            raise standard.no_standard_rpc(method, self.endpoint) from None

    def _admin_offered(self) -> bool:
        """Whether the admin service answers at all (False: UNIMPLEMENTED for Health)."""
        call = self._channel_for_process().unary_unary(f"/{ADMIN_SERVICE}/Health")
        try:
            call(b"{}", timeout=self.timeout_s, metadata=self._metadata())
        except grpc.RpcError as exc:
            return not isinstance(
                transport_error(exc, self.endpoint, "Health"), ServiceNotOfferedError
            )
        return True

    def _extended(self, fast: Callable[[], T], fallback: Callable[[], T]) -> T:
        """``fast`` (it uses our services) unless this endpoint is known to lack them;
        ``fallback`` (standard v2 RPCs only) then, and when ``fast`` finds them missing."""
        if not standard.is_standard(self.endpoint):
            try:
                return fast()
            except ServiceNotOfferedError:
                standard.mark_standard(self.endpoint)
        return fallback()

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

    def _resource(self, name: str) -> pb.Resource:
        return pb.Resource(name=name, resource_namespace=self.namespace)

    # ---- producing -------------------------------------------------------------------------

    def send_batch(self, topic: str, messages: Iterable[Any]) -> list[SendReceipt]:
        """Send many messages to ``topic`` in ONE SendMessage request; receipts in order.

        Each item is an :class:`OutgoingMessage`, a tuple in its field order
        ``(body, tag, keys, properties, message_group, delivery_timestamp_ms)`` or a bare
        body. The broker stores the whole batch or none of it (a bad message fails the
        request with its error, e.g. MessageTooLargeError). A cluster client sends the
        batch to one broker group of the topic, the next group on the next call.
        """
        if self.cluster is not None:
            items = list(messages)
            groups = [
                None if type(m) is bytes else OutgoingMessage.of(m).message_group for m in items
            ]
            if any(groups):  # FIFO messages: each message group pinned to one broker group
                return self.cluster.send_split(
                    topic, groups, lambda c, idx: c.send_batch(topic, [items[i] for i in idx])
                )
            return self.cluster.send(topic, lambda c: c.send_batch(topic, items))
        return self.send_batch_async(topic, messages).result()

    def send_columns(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        tags: Sequence[str | None] | None = None,
        keys: Sequence[Sequence[str] | None] | None = None,
        properties: Sequence[Mapping[str, str] | None] | None = None,
        message_groups: Sequence[str | None] | None = None,
        delivery_ms: Sequence[int | None] | None = None,
    ) -> list[SendReceipt]:
        """:meth:`send_batch` for messages given column by column, with no object per
        message: columns as :func:`wire.encode_send_request` takes them (None: absent)."""
        if self.cluster is not None:
            if message_groups is not None and any(message_groups):

                def part(c: RocketMQClient, idx: list[int]) -> list[SendReceipt]:
                    pick = _picker(idx)
                    return c.send_columns(
                        topic,
                        pick(bodies) or [],
                        tags=pick(tags),
                        keys=pick(keys),
                        properties=pick(properties),
                        message_groups=pick(message_groups),
                        delivery_ms=pick(delivery_ms),
                    )

                return self.cluster.send_split(topic, message_groups, part)
            return self.cluster.send(
                topic,
                lambda c: c.send_columns(
                    topic,
                    bodies,
                    tags=tags,
                    keys=keys,
                    properties=properties,
                    message_groups=message_groups,
                    delivery_ms=delivery_ms,
                ),
            )
        return self.send_columns_async(
            topic,
            bodies,
            tags=tags,
            keys=keys,
            properties=properties,
            message_groups=message_groups,
            delivery_ms=delivery_ms,
        ).result()

    def send(self, topic: str, body: bytes | str, **fields: Any) -> SendReceipt:
        """Send one message; ``fields`` are :class:`OutgoingMessage`'s (tag, keys, ...)."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        return self.send_batch(topic, [OutgoingMessage(data, **fields)])[0]

    # ---- routes and offsets ----------------------------------------------------------------

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

    def query_route(self, topic: str) -> list[QueueInfo]:
        """The topic's message queues (TopicNotFoundError when it does not exist); a
        cluster client lists every broker group's, sorted by (broker, queue id)."""
        if self.cluster is not None:
            # any broker of a cluster answers for every broker group of the topic
            first = self.cluster.client_at(self.cluster.brokers(topic)[0].grpc_addr)
            return sorted(first.query_route(topic), key=lambda q: (q.broker_name, q.queue_id))
        request = service_pb2.QueryRouteRequest(topic=self._resource(topic))
        host, _, port = self.endpoint.rpartition(":")
        request.endpoints.scheme = pb.AddressScheme.IPv4
        request.endpoints.addresses.add(host=host, port=int(port))
        response = self.call("QueryRoute", request)
        return sorted(
            (convert.queue_from_protobuf(q) for q in response.message_queues),
            key=lambda q: q.queue_id,
        )

    @routed(1)
    def get_offset(
        self, group: str, topic: str, queue_id: int, *, broker: str | None = None
    ) -> int:
        """The offset ``group`` committed in the queue."""
        request = service_pb2.GetOffsetRequest(
            group=self._resource(group), message_queue=convert.message_queue(topic, queue_id)
        )
        return int(self.call("GetOffset", request).offset)

    @routed(1)
    def update_offset(
        self, group: str, topic: str, queue_id: int, offset: int, *, broker: str | None = None
    ) -> None:
        """Commit ``offset`` (the next message to consume) for ``group`` in the queue."""
        request = service_pb2.UpdateOffsetRequest(
            group=self._resource(group),
            message_queue=convert.message_queue(topic, queue_id),
            offset=offset,
        )
        self.call("UpdateOffset", request)

    @routed(0)
    def query_offset(
        self,
        topic: str,
        queue_id: int,
        policy: str = "END",
        *,
        timestamp_ms: int | None = None,
        broker: str | None = None,
    ) -> int:
        """The queue's first offset (BEGINNING), next offset (END), or the first offset
        stored at or after ``timestamp_ms`` (TIMESTAMP)."""
        if policy not in QUERY_POLICIES:
            raise InvalidArgumentError(f"policy must be one of {sorted(QUERY_POLICIES)}")
        if (policy == "TIMESTAMP") != (timestamp_ms is not None):
            raise InvalidArgumentError("timestamp_ms goes with policy TIMESTAMP, and only it")
        request = service_pb2.QueryOffsetRequest(
            message_queue=convert.message_queue(topic, queue_id),
            query_offset_policy=QUERY_POLICIES[policy],
        )
        if timestamp_ms is not None:
            request.timestamp.FromMilliseconds(timestamp_ms)
        return int(self.call("QueryOffset", request).offset)

    # ---- pulling ---------------------------------------------------------------------------

    @routed(1)
    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        filter_expression: str | None = None,
        filter_type: str = "TAG",
        long_polling_timeout_ms: int = 0,
        with_bounds: bool = True,
        broker: str | None = None,
    ) -> PullBatch:
        """Up to ``max_count`` messages of one queue from ``offset``, in offset order.

        To read exactly ``[start, end)``, pull from ``start`` with ``max_count = end -
        offset`` until ``next_offset >= end`` (a pull never returns more than asked). An
        offset outside the queue raises InvalidOffsetError (its ``next_offset`` attribute,
        when the broker gave one, is the nearest valid offset); an empty batch with
        ``next_offset == offset`` means the queue holds nothing newer. With
        ``long_polling_timeout_ms`` the broker waits that long for new messages.
        ``with_bounds`` fills ``min_offset``/``max_offset`` (-1 otherwise).
        """
        if filter_type not in FILTER_TYPES:
            raise InvalidArgumentError(f"filter_type must be TAG or SQL, got {filter_type!r}")
        if max_count < 1 or offset < 0:
            raise InvalidArgumentError("pull needs max_count >= 1 and offset >= 0")
        request = service_pb2.PullMessageRequest(
            group=self._resource(group),
            message_queue=convert.message_queue(topic, queue_id),
            offset=offset,
            batch_size=max_count,
        )
        if filter_expression:
            request.filter_expression.type = FILTER_TYPES[filter_type]
            request.filter_expression.expression = filter_expression
        request.long_polling_timeout.FromMilliseconds(max(0, long_polling_timeout_ms))
        deadline_s = self.timeout_s + max(0, long_polling_timeout_ms) / 1000
        messages, next_offset = self._retrying(
            "PullMessage", lambda: self._pull_once(request, deadline_s)
        )
        # The PullMessage stream does not carry the queue's bounds: two cheap calls do.
        low, high = (
            (
                self.query_offset(topic, queue_id, "BEGINNING"),
                self.query_offset(topic, queue_id, "END"),
            )
            if with_bounds
            else (-1, -1)
        )
        return PullBatch(messages, next_offset, low, high)

    @routed(1)
    def pull_raw(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int | None = None,
        filter_expression: str | None = None,
        filter_type: str = "TAG",
        long_polling_timeout_ms: int = 0,
        broker: str | None = None,
    ) -> RawPullBatch:
        """Like :meth:`pull`, but the units come back as stored, for decoding in bulk.

        One call can return up to the broker's ``max_raw_pull_batch`` units (and about
        ``max_bytes``, default 8 MiB). Decode and verify the batch with
        ``columnar.decode_units(batch.data, batch.sizes)``. Errors as for :meth:`pull`.
        """
        if filter_type not in FILTER_TYPES:
            raise InvalidArgumentError(f"filter_type must be TAG or SQL, got {filter_type!r}")
        if max_count < 1 or offset < 0:
            raise InvalidArgumentError("pull needs max_count >= 1 and offset >= 0")
        payload: dict[str, Any] = {
            "group": group,
            "topic": topic,
            "queue_id": queue_id,
            "offset": offset,
            "max_count": max_count,
        }
        if max_bytes is not None:
            payload["max_bytes"] = max_bytes
        if filter_expression:
            payload.update(filter_type=filter_type, filter_expression=filter_expression)
        if long_polling_timeout_ms > 0:
            payload["long_polling_timeout_ms"] = long_polling_timeout_ms
        request = encode_request(payload)
        call = self._channel_for_process().unary_unary(RAW_PULL_METHOD)
        timeout_s = self.timeout_s + max(0, long_polling_timeout_ms) / 1000
        return self._retrying(
            "PullRaw",
            lambda: decode_raw_pull(
                call(request, timeout=timeout_s, metadata=self._metadata()), offset
            ),
        )

    @routed(1)
    def pull_columns(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        *,
        max_bytes: int | None = None,
        filter_expression: str | None = None,
        filter_type: str = "TAG",
        long_polling_timeout_ms: int = 0,
        broker: str | None = None,
    ) -> ColumnBatch:
        """Like :meth:`pull`, as columns checked to come from this queue in increasing
        offsets from ``offset`` (CorruptionError otherwise): a bulk pull (:meth:`pull_raw`,
        units CRC-checked) when the broker offers it, else a PullMessage
        (``standard.pull_columns``; ``max_bytes`` then does not apply). Errors as for
        :meth:`pull`."""

        def bulk() -> ColumnBatch:
            raw = self.pull_raw(
                group,
                topic,
                queue_id,
                offset,
                max_count,
                max_bytes=max_bytes,
                filter_expression=filter_expression,
                filter_type=filter_type,
                long_polling_timeout_ms=long_polling_timeout_ms,
            )
            return ColumnBatch(decode_units(raw.data, raw.sizes), raw.next_offset)

        def plain() -> ColumnBatch:
            return standard.pull_columns(
                self,
                group,
                topic,
                queue_id,
                offset,
                max_count,
                filter_expression=filter_expression,
                filter_type=filter_type,
                long_polling_timeout_ms=long_polling_timeout_ms,
            )

        batch = self._extended(bulk, plain)
        check_placement(batch.columns, topic, queue_id, offset)
        return batch

    def _pull_once(
        self, request: service_pb2.PullMessageRequest, deadline_s: float
    ) -> tuple[list[ReceivedMessage], int]:
        """One PullMessage stream: status, messages, next_offset (read to its end)."""
        messages, next_offset, status = [], None, None
        stream = self.stub.PullMessage(request, timeout=deadline_s, metadata=self._metadata())
        for response in stream:
            kind = response.WhichOneof("content")
            if kind == "status":
                status = response.status
            elif kind == "message":
                messages.append(convert.from_protobuf(response.message))
            elif kind == "next_offset":
                next_offset = response.next_offset
        if status is None:
            raise RocketMQError("PullMessage answered without a status")
        if status.code != pb.Code.MESSAGE_NOT_FOUND:  # MESSAGE_NOT_FOUND: nothing new
            try:
                check(status)
            except InvalidOffsetError as exc:
                exc.next_offset = next_offset  # type: ignore[attr-defined]
                raise
        if next_offset is None:
            next_offset = messages[-1].queue_offset + 1 if messages else request.offset
        return messages, next_offset
