"""The transport of one broker endpoint: its channel, headers, retries and error mapping.

:class:`Transport` is held by every part of a
:class:`~broker_core.client.broker_client.BrokerClient` (producer, puller, offsets, admin),
which call the broker through it.

* **Lazy, per-process channel.** Nothing connects until the first call; a process that did
  not create the channel (fork, unpickled copy) makes its own; ``close()`` drops it.
* **Retries.** :meth:`Transport.retrying` retries retriable errors up to ``max_attempts``
  times with exponential backoff from ``retry_backoff_s`` (capped at ``MAX_BACKOFF_S``).
* **Our services or the standard ones.** :meth:`Transport.extended` runs the fast path
  (our admin and bulk services) unless the endpoint is known to lack them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import grpc
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.auth.signature import signed_metadata
from broker_core.auth.tls import channel_credentials
from broker_core.client import standard
from broker_core.client.admin import ADMIN_SERVICE, decode_response, encode_request
from broker_core.client.errors import check, transport_error
from broker_core.client.settings import ClientSettings
from broker_core.errors import RocketMQError, ServiceNotOfferedError

T = TypeVar("T")

CLIENT_VERSION: Final = "broker_core-0.1.0"
MAX_MESSAGE_BYTES: Final = 256 << 20
MAX_BACKOFF_S: Final = 2.0
_SERVICE: Final = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


class Transport:
    """Channel, metadata, retries and the raw/admin calls of one endpoint."""

    def __init__(self, endpoint: str, settings: ClientSettings) -> None:
        self.endpoint = endpoint
        self.settings = settings
        self.timeout_s = settings.timeout_s
        self.max_attempts = settings.max_attempts
        self.retry_backoff_s = settings.retry_backoff_s
        self.namespace = settings.namespace
        self._generated_id: tuple[int, str] | None = None  # (pid, id) made in that process
        self._init_process_state()

    def _init_process_state(self) -> None:
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: service_pb2_grpc.MessagingServiceStub | None = None
        self.raw_methods: dict[str, grpc.UnaryUnaryMultiCallable] = {}  # per channel
        self._owner_pid = -1

    # ---- lifecycle -----------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """The given id, else one made per process (``host@pid@random``)."""
        if self.settings.client_id:
            return self.settings.client_id
        pid = os.getpid()
        if self._generated_id is None or self._generated_id[0] != pid:
            self._generated_id = (pid, f"{socket.gethostname()}@{pid}@{uuid.uuid4().hex[:8]}")
        return self._generated_id[1]

    def channel_for_process(self) -> grpc.Channel:
        """This process's channel to the endpoint (made on first use)."""
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
                tls = self.settings.tls_files
                self._channel = (
                    grpc.secure_channel(self.endpoint, channel_credentials(*tls), options)
                    if tls is not None
                    else grpc.insecure_channel(self.endpoint, options)
                )
                self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)
                self.raw_methods = {}
                self._owner_pid = os.getpid()
            return self._channel

    @property
    def stub(self) -> service_pb2_grpc.MessagingServiceStub:
        """The ``MessagingService`` stub of this process's channel."""
        self.channel_for_process()
        assert self._stub is not None
        return self._stub

    @property
    def owned_here(self) -> bool:
        """Whether this process made the open channel (False: none, or a parent's)."""
        return self._owner_pid == os.getpid()

    def close(self) -> None:
        """Close this process's channel (idempotent); later calls open a new one."""
        with self._lock:
            if self._channel is not None and self._owner_pid == os.getpid():
                self._channel.close()
            self._channel, self._stub, self._owner_pid = None, None, -1
            self.raw_methods = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_channel", "_stub", "raw_methods", "_owner_pid"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_process_state()

    # ---- plumbing --------------------------------------------------------------------------

    def metadata(self) -> list[tuple[str, str]]:
        """Every request's headers; signed (``MQv2-HMAC-SHA1``, UTC stamp) given keys."""
        headers = [
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-request-id", uuid.uuid4().hex),
            ("x-mq-namespace", self.namespace),
        ]
        access_key, secret_key = self.settings.access_key, self.settings.secret_key
        if access_key and secret_key:
            headers += signed_metadata(access_key, secret_key)
        return headers

    def retrying(self, what: str, attempt: Callable[[], T], *, attempts: int | None = None) -> T:
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
                self.raw_method(method)
                if isinstance(request, bytes)
                else getattr(self.stub, method)
            )
            response = send(request, timeout=timeout_s or self.timeout_s, metadata=self.metadata())
            check(response.status)
            return response

        return self.retrying(method, attempt)

    def raw_method(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        """``MessagingService/method`` of this process's channel, taking serialized requests."""
        channel = self.channel_for_process()
        raw = self.raw_methods.get(method)
        if raw is None:
            output = _SERVICE.methods_by_name[method].output_type.name
            raw = channel.unary_unary(
                f"/{_SERVICE.full_name}/{method}",
                request_serializer=None,
                response_deserializer=getattr(service_pb2, output).FromString,
            )
            self.raw_methods[method] = raw
        return raw

    def admin(self, method: str, payload: Mapping[str, Any]) -> Any:
        # Raw bytes in and out: an error raised inside a (de)serializer would reach us as
        # a bare gRPC INTERNAL instead of the broker's status.
        # Always asked, even of an endpoint marked standard: admin calls are rare, and an
        # answer shows the address now serves our services (it changed hands).
        call = self.channel_for_process().unary_unary(f"/{ADMIN_SERVICE}/{method}")
        request = encode_request(payload)
        try:
            result = self.retrying(
                method,
                lambda: decode_response(
                    call(request, timeout=self.timeout_s, metadata=self.metadata())
                ),
            )
        except ServiceNotOfferedError:
            if method != "Health" and self.admin_offered():
                raise  # the admin service is there, only this method is not
            standard.mark_standard(self.endpoint)
            raise standard.no_standard_rpc(method, self.endpoint) from None
        standard.forget(self.endpoint)  # answered: whatever was marked here is gone
        return result

    def admin_offered(self) -> bool:
        """Whether the admin service answers at all (False: UNIMPLEMENTED for Health)."""
        call = self.channel_for_process().unary_unary(f"/{ADMIN_SERVICE}/Health")
        try:
            call(b"{}", timeout=self.timeout_s, metadata=self.metadata())
        except grpc.RpcError as exc:
            return not isinstance(
                transport_error(exc, self.endpoint, "Health"), ServiceNotOfferedError
            )
        return True

    def extended(self, fast: Callable[[], T], fallback: Callable[[], T]) -> T:
        """``fast`` (it uses our services) unless this endpoint is known to lack them;
        ``fallback`` (standard v2 RPCs only) then, and when ``fast`` finds them missing."""
        if not standard.is_standard(self.endpoint):
            try:
                return fast()
            except ServiceNotOfferedError:
                standard.mark_standard(self.endpoint)
        return fallback()

    def resource(self, name: str) -> pb.Resource:
        return pb.Resource(name=name, resource_namespace=self.namespace)
