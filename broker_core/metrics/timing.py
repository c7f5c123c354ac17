"""The gate wrapper that times every unary and server-streaming call into a Recorder.

A streaming call is timed until its last response was handed to gRPC. Telemetry (the
bidirectional session stream) and client-streaming calls are not timed: they last as
long as the client lives.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from broker_core.metrics.recorder import Recorder

Behaviour = Callable[[Any, grpc.ServicerContext], Any]


def timing_wrapper(
    recorder: Recorder,
) -> Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]:
    """A ``Gate`` wrapper recording ``rocketmq_rpc_latency`` by method name."""
    cache: dict[tuple[str, int], grpc.RpcMethodHandler] = {}

    def wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if handler.request_streaming:
            return handler
        key = (method, id(handler))
        wrapped = cache.get(key)
        if wrapped is None:
            wrapped = cache[key] = _timed(method.rpartition("/")[2], handler, recorder)
        return wrapped

    return wrap


def _timed(name: str, handler: grpc.RpcMethodHandler, recorder: Recorder) -> grpc.RpcMethodHandler:
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.response_streaming:
        inner_stream: Behaviour = handler.unary_stream

        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started = time.perf_counter()
            try:
                yield from inner_stream(request, context)
            finally:
                recorder.rpc(name, (time.perf_counter() - started) * 1000)

        return grpc.unary_stream_rpc_method_handler(stream, **kwargs)
    inner: Behaviour = handler.unary_unary

    def unary(request: Any, context: grpc.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            return inner(request, context)
        finally:
            recorder.rpc(name, (time.perf_counter() - started) * 1000)

    return grpc.unary_unary_rpc_method_handler(unary, **kwargs)
