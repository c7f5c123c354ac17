"""The raw transport ceiling: grpcio itself, with no message work on either side.

A client sends the same pre-encoded request bytes again and again (no protobuf building,
no parsing) to a server that drops them and answers with an empty message, keeping a
given number of requests in flight. No client/broker pair on grpcio moves batches of
that size faster on this machine; ``produce`` reports its rate as
``transport_ceiling_msg_s`` and our share of it.

Run as ``python -m bench.transport_ceiling``: prints the port, then serves until killed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import deque
from concurrent import futures
from typing import Any

import grpc

from broker_core.client.transport import MAX_MESSAGE_BYTES

METHOD = "/bench.Drop/Drop"
_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


def _drop(request: bytes, context: grpc.ServicerContext) -> bytes:
    return b""


def serve() -> None:
    """The dropping server: raw bytes in (no deserializer), an empty answer out."""
    handler = grpc.method_handlers_generic_handler(
        "bench.Drop", {"Drop": grpc.unary_unary_rpc_method_handler(_drop)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(8), handlers=[handler], options=_OPTIONS)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def send_rate(
    address: str, request: bytes, messages_per_request: int, requests: int, in_flight: int = 1
) -> float:
    """msg/s of ``requests`` sends of ``request`` with ``in_flight`` outstanding at a time,
    after a warm-up request."""
    with grpc.insecure_channel(address, options=_OPTIONS) as channel:
        call = channel.unary_unary(METHOD)
        call(request, timeout=30)
        start = time.perf_counter()
        if in_flight <= 1:
            for _ in range(requests):
                call(request, timeout=30)
        else:
            pending: deque[Any] = deque()
            for _ in range(requests):
                if len(pending) >= in_flight:
                    pending.popleft().result()
                pending.append(call.future(request, timeout=30))
            for future in pending:
                future.result()
        return requests * messages_per_request / (time.perf_counter() - start)


def measure(request: bytes, messages_per_request: int, requests: int, in_flight: int = 1) -> float:
    """Start the dropping server in its own process and time ``send_rate`` against it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.transport_ceiling"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        return send_rate(f"127.0.0.1:{port}", request, messages_per_request, requests, in_flight)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    serve()
