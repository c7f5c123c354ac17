"""The transport under :class:`~broker_core.client.RocketMQClient`: its channel, headers,
retries and error mapping (:class:`ClientCore`, the base of the client's call families).

* **Lazy, per-process channel.** Nothing connects until the first call; a process that did
  not create the channel (fork, unpickled copy) makes its own; ``close()`` drops it.
* **Retries.** :meth:`ClientCore._retrying` retries retriable errors up to ``max_attempts``
  times with exponential backoff from ``retry_backoff_s`` (capped at ``MAX_BACKOFF_S``).
* **Our services or the standard ones.** :meth:`ClientCore._extended` runs the fast path
  (our admin and bulk services) unless the endpoint is known to lack them.

The attributes are set by ``RocketMQClient.__init__``; this class only declares them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.auth.signature import signed_metadata
from broker_core.auth.tls import channel_credentials
from broker_core.client import standard
from broker_core.client.admin import ADMIN_SERVICE, decode_response, encode_request
from broker_core.client.errors import check, transport_error
from broker_core.client.in_flight import SendWindow
from broker_core.errors import RocketMQError, ServiceNotOfferedError

if TYPE_CHECKING:
    from broker_core.client.cluster import ClusterRouting

T = TypeVar("T")

CLIENT_VERSION: Final = "broker_core-0.1.0"
MAX_MESSAGE_BYTES: Final = 256 << 20
MAX_BACKOFF_S: Final = 2.0
_SERVICE: Final = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


class ClientCore:
    """Channel, metadata, retries and the raw/admin calls every call family builds on."""

    endpoint: str
    cluster: ClusterRouting | None
    timeout_s: float
    max_attempts: int
    retry_backoff_s: float
    namespace: str
    access_key: str | None
    _secret_key: str | None
    tls: bool
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    max_in_flight: int
    _given_client_id: str | None
    _generated_id: tuple[int, str] | None
    _lock: threading.Lock
    _channel: grpc.Channel | None
    _stub: service_pb2_grpc.MessagingServiceStub | None
    _raw_methods: dict[str, grpc.UnaryUnaryMultiCallable]
    _owner_pid: int
    _window: SendWindow

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
                    # reconnect within a second of a lost connection, so that a retry after
                    # our backoff (1 s, 2 s, ...) meets a live channel rather than gRPC's
                    # own reconnect backoff (1 s x 1.6 per failure by default)
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1_000),
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
        # Always asked, even of an endpoint marked standard: admin calls are rare, and an
        # answer shows the address now serves our services (it changed hands).
        call = self._channel_for_process().unary_unary(f"/{ADMIN_SERVICE}/{method}")
        request = encode_request(payload)
        try:
            result = self._retrying(
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
        standard.forget(self.endpoint)  # answered: whatever was marked here is gone
        return result

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

    def _resource(self, name: str) -> pb.Resource:
        return pb.Resource(name=name, resource_namespace=self.namespace)
