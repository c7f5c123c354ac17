"""The ceiling of single unary calls on this machine: grpcio alone, driven like ``latency``.

``latency`` sends one request per message from ``processes × threads`` synchronous
senders. Whatever our broker does per call, it cannot take more such calls than grpcio
itself can on this machine. This measures that: the dropping server of
:mod:`bench.transport_ceiling` (no message work; its own process, as our broker is)
answers blocking unary calls of a ``body_bytes`` request, made back to back for
``seconds`` by the same number of sender processes and threads, one channel per process
(as one ``RocketMQClient`` per process). Each call's round trip is timed by its sender.

Run with ``python -m bench.echo_ceiling [SECONDS [PROCESSES THREADS]]`` to print one.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc

from bench.report import percentiles_ms
from bench.transport_ceiling import METHOD

CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Ceiling:
    """Calls per second all senders made together, and their round trips' percentiles."""

    calls_s: float
    round_trip_ms: dict[str, float]


def _sender_process(
    address: str, seconds: float, threads: int, body_bytes: int, out: Connection
) -> None:
    """Child process: ``threads`` back-to-back callers on one channel; sends back
    (calls/s, round trips in ns)."""
    request = b"x" * body_bytes
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(METHOD)
        call(request, timeout=CALL_TIMEOUT_S)  # connected before the clock starts
        samples: list[list[int]] = [[] for _ in range(threads)]
        stop_ns = time.monotonic_ns() + int(seconds * 1e9)

        def caller(mine: list[int]) -> None:
            while (started := time.monotonic_ns()) < stop_ns:
                call(request, timeout=CALL_TIMEOUT_S)
                mine.append(time.monotonic_ns() - started)

        workers = [threading.Thread(target=caller, args=(s,)) for s in samples]
        begun = time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.monotonic() - begun
    every = [ns for s in samples for ns in s]
    out.send((len(every) / elapsed, every))


def _start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.transport_ceiling"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the echo server did not start (said {line!r})")
    return proc, f"127.0.0.1:{int(line)}"


def measure(seconds: float, senders: tuple[int, int], body_bytes: int) -> Ceiling:
    """The echo server's calls/s and round trips under ``senders`` = (processes,
    threads each) calling back to back for ``seconds``."""
    processes, threads = senders
    server, address = _start_server()
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(processes)]
    children = [
        context.Process(target=_sender_process, args=(address, seconds, threads, body_bytes, tx))
        for _rx, tx in pipes
    ]
    try:
        for child in children:
            child.start()
        answers = [rx.recv() for rx, _tx in pipes]
    finally:
        join_or_kill(children)
        server.kill()
        server.wait()
    round_trips = [ns for _rate, samples in answers for ns in samples]
    return Ceiling(sum(rate for rate, _ in answers), percentiles_ms(round_trips))


def join_or_kill(children: list[Any], timeout_s: float = 30.0) -> None:
    """Join each child process, killing the ones still running ``timeout_s`` later."""
    for child in children:
        child.join(timeout_s)
    for child in children:
        if child.is_alive():
            child.kill()
            child.join()


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:]]
    shape = (int(args[1]), int(args[2])) if len(args) >= 3 else (4, 4)
    print(measure(args[0] if args else 5.0, shape, 128))
