"""The one server interceptor: refuses calls until the broker is up, then hands each call
to the optional per-call wrappers (authentication and authorization, metrics).

While the store recovers, every call but the health service's is refused with gRPC
UNAVAILABLE ("broker is starting"), which clients retry. Once ``open()`` ran and no
wrapper is installed, a call costs one attribute check here and goes straight on.

A wrapper is ``wrap(method, handler) -> handler``: it gets the full method name
(``/package.Service/Method``) and the ``grpc.RpcMethodHandler`` found, and returns the
handler to use (the same one to leave the call alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

import grpc

Wrapper = Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]

_ALWAYS_OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def _refuse(code: grpc.StatusCode, message: str) -> Callable[..., NoReturn]:
    def behaviour(request: object, context: grpc.ServicerContext) -> NoReturn:
        context.abort(code, message)
        raise AssertionError("unreachable: ServicerContext.abort raises")

    return behaviour


def refusing_handler(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that aborts every call with ``code``."""
    behaviour = _refuse(code, message)
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behaviour, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behaviour, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behaviour, **kwargs)
    return grpc.unary_unary_rpc_method_handler(behaviour, **kwargs)


class Gate(grpc.ServerInterceptor):
    """Start-up gate plus the wrappers it is built with (applied in order)."""

    def __init__(self, wrappers: Sequence[Wrapper] = ()) -> None:
        self.ready = False
        self.wrappers: tuple[Wrapper, ...] = tuple(wrappers)

    def open(self) -> None:
        self.ready = True

    def close(self) -> None:
        self.ready = False

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None:
            return None
        method: str = details.method
        if method.startswith(_ALWAYS_OPEN):
            return handler
        if not self.ready:
            return refusing_handler(
                handler,
                grpc.StatusCode.UNAVAILABLE,
                "broker is starting (recovering its store); retry",
            )
        for wrap in self.wrappers:
            handler = wrap(method, handler)
        return handler
