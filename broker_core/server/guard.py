"""The gate wrapper that authenticates and authorizes every call when ``[auth]`` is on.

Before a handler runs, the call's ``authorization`` signature is verified
(``auth.signature``) and the user's rules checked against what the call touches
(``auth.resources``). A refused call never reaches its handler — nothing is stored —
and is answered the way its service answers errors, so clients see a clear status:

* MessagingService: a response whose ``status`` is UNAUTHORIZED (40100) or FORBIDDEN
  (40300) with the reason (streaming calls: one such response; Telemetry included);
* the admin service and bulk pulls: their JSON status with the same codes;
* any other service: gRPC UNAUTHENTICATED / PERMISSION_DENIED.

The health service is never wrapped (see ``gate.py``). Who made an admin call is handed
to the audit log (``auth.audit.set_caller``).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeAlias

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import service_pb2

from broker_core.auth import audit
from broker_core.auth.acl import User
from broker_core.auth.authority import Authority
from broker_core.auth.resources import ADMIN, BULK, MESSAGING
from broker_core.errors import RocketMQError, UnauthorizedError
from broker_core.protocol.pull_raw import encode_refusal
from broker_core.protocol.status import status_of
from broker_core.server.json_args import Json, status_json

log = logging.getLogger(__name__)

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
# What a call takes and answers: a generated message (MessagingService), the raw bytes of
# our own services (Bulk; Admin requests), or the Admin service's JSON before encoding.
Request: TypeAlias = ProtoMessage | bytes
Answer: TypeAlias = ProtoMessage | bytes | Json
Refuse: TypeAlias = Callable[[RocketMQError, grpc.ServicerContext], Answer]


def peer_ip(peer: str) -> str | None:
    """The IP address in ``grpc.ServicerContext.peer()``; None for anything else."""
    scheme, _, rest = urllib.parse.unquote(peer).partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host = rest.rpartition(":")[0].strip("[]")
    return host or None


def _refusal(service: str, method: str) -> Refuse:
    """How ``service`` answers a refused call of ``method``."""
    if service == MESSAGING and method in _SERVICE.methods_by_name:
        response = message_factory.GetMessageClass(_SERVICE.methods_by_name[method].output_type)
        return lambda exc, context: response(status=status_of(exc))
    if service == ADMIN:
        return lambda exc, context: {"status": _json_status(exc), "result": None}
    if service == BULK:
        return lambda exc, context: encode_refusal(_json_status(exc))  # as PullRaw refuses
    return _abort


def _json_status(exc: RocketMQError) -> Json:
    return status_json(status_of(exc))


def _abort(exc: RocketMQError, context: grpc.ServicerContext) -> NoReturn:
    code = (
        grpc.StatusCode.UNAUTHENTICATED
        if isinstance(exc, UnauthorizedError)
        else grpc.StatusCode.PERMISSION_DENIED
    )
    context.abort(code, str(exc))
    raise AssertionError("unreachable: ServicerContext.abort raises")


class Guard:
    """``Gate`` wrapper; ``authority`` decides, this only plumbs calls and answers."""

    def __init__(self, authority: Authority) -> None:
        self.authority = authority
        self._cache: dict[tuple[str, int], grpc.RpcMethodHandler] = {}

    def __call__(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        key = (method, id(handler))
        wrapped = self._cache.get(key)
        if wrapped is None:
            wrapped = self._cache[key] = self._wrap(method, handler)
        return wrapped

    def check(
        self, service: str, method: str, request: Request | None, context: grpc.ServicerContext
    ) -> User:
        """The caller, allowed to make this call; UnauthorizedError/AccessDeniedError."""
        peer = context.peer()
        try:
            user = self.authority.authenticate(context.invocation_metadata() or ())
            self.authority.authorize(user, service, method, request, peer_ip(peer))
        except RocketMQError:
            raise
        except Exception as exc:  # a bug here must refuse the call, not let it through
            log.exception("%s: checking the caller failed", method)
            raise UnauthorizedError(
                f"{method}: the request could not be authenticated ({type(exc).__name__})"
            ) from exc
        audit.set_caller(user.access_key, peer)
        return user

    def _refused(self, method: str, exc: RocketMQError, context: grpc.ServicerContext) -> None:
        log.info("%s refused for %s: %s", method, context.peer(), exc)

    def _wrap(self, full: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, method = full.strip("/").rpartition("/")
        refuse = _refusal(service, method)
        kwargs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._session(service, method, handler.stream_stream, refuse), **kwargs
            )
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(service, method, handler.stream_unary, refuse, False), **kwargs
            )
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(service, method, handler.unary_stream, refuse), **kwargs
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary(service, method, handler.unary_unary, refuse, True), **kwargs
        )

    def _unary(
        self,
        service: str,
        method: str,
        inner: Callable[..., Answer],
        refuse: Refuse,
        inspect: bool,
    ) -> Callable[..., Answer]:
        def behaviour(request: Request, context: grpc.ServicerContext) -> Answer:
            try:
                self.check(service, method, request if inspect else None, context)
            except RocketMQError as exc:
                self._refused(method, exc, context)
                return refuse(exc, context)
            return inner(request, context)

        return behaviour

    def _stream(
        self, service: str, method: str, inner: Callable[..., Iterator[Answer]], refuse: Refuse
    ) -> Callable[..., Iterator[Answer]]:
        def behaviour(request: Request, context: grpc.ServicerContext) -> Iterator[Answer]:
            try:
                self.check(service, method, request, context)
            except RocketMQError as exc:
                self._refused(method, exc, context)
                yield refuse(exc, context)
                return
            yield from inner(request, context)

        return behaviour

    def _session(
        self, service: str, method: str, inner: Callable[..., Iterator[Answer]], refuse: Refuse
    ) -> Callable[..., Iterator[Answer]]:
        """Telemetry: the signature of the stream's opening call decides for its life."""

        def behaviour(
            requests: Iterator[ProtoMessage], context: grpc.ServicerContext
        ) -> Iterator[Answer]:
            try:
                self.check(service, method, None, context)
            except RocketMQError as exc:
                self._refused(method, exc, context)
                yield refuse(exc, context)
                return
            yield from inner(requests, context)

        return behaviour
