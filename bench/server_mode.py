"""server-mode: grpc's thread-pool server vs its asyncio server, same broker, same handlers.

Why this exists: the broker's handlers call a synchronous broker (the store appends and
fsyncs on the calling thread), so an asyncio server has to run them in a thread pool too
(``grpc.aio.server(migration_thread_pool=…)``). This bench measures whether the asyncio
front end buys anything anyway. Each mode gets its own broker process
(``python -m bench.server_mode serve --mode sync|aio``) serving ``MessagingService``
exactly as the real broker does; the client side is the same for both:

* ``batch``: one client, SendMessage with 256 messages of 128 B (the produce workload);
* ``concurrent``: 16 threads, each sending single 128 B messages (many small calls in
  flight, where an event loop is supposed to shine).

The JSON result is sync's ``concurrent`` rate over aio's (higher: sync is the better
choice); the table shows every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.report import Result
from broker_core.broker.broker import Broker
from broker_core.client import RocketMQClient
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.server.admin import admin_handler
from broker_core.server.context import ServerContext
from broker_core.server.service import MessagingService

BODY = bytes(range(128))
SIZES = {"tiny": (4, 200), "full": (300, 20_000)}  # batches of 256; single sends in total
THREADS = 16


def _serve(mode: str, store_dir: str) -> None:
    broker = Broker(BrokerConfig(default_queue_nums=8), StoreConfig(store_dir=store_dir))
    broker.start()
    pool = ThreadPoolExecutor(max_workers=64)
    ctx = ServerContext(broker, "127.0.0.1:0", broker.config.broker_name)

    if mode == "sync":
        server = grpc.server(pool)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingService(ctx), server)
        server.add_generic_rpc_handlers((admin_handler(ctx),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        print(f"READY 127.0.0.1:{port}", flush=True)
        sys.stdin.read()  # the bench closes stdin to stop us
        server.stop(1).wait()
    else:

        async def main() -> None:
            aio = grpc.aio.server(migration_thread_pool=pool)
            service_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingService(ctx), aio)
            aio.add_generic_rpc_handlers((admin_handler(ctx),))
            port = aio.add_insecure_port("127.0.0.1:0")
            await aio.start()
            print(f"READY 127.0.0.1:{port}", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            await aio.stop(1)

        asyncio.run(main())
    broker.stop()


def _measure(endpoint: str, batches: int, singles: int) -> tuple[float, float]:
    with RocketMQClient(endpoint) as client:
        client.create_topic("bench-mode", queues=8)
        batch = [BODY] * 256
        client.send_batch("bench-mode", batch)
        start = time.perf_counter()
        for _ in range(batches):
            client.send_batch("bench-mode", batch)
        batch_rate = batches * 256 / (time.perf_counter() - start)

        def sender(count: int) -> None:
            for _ in range(count):
                client.send("bench-mode", BODY)

        threads = [
            threading.Thread(target=sender, args=(singles // THREADS,)) for _ in range(THREADS)
        ]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        single_rate = singles // THREADS * THREADS / (time.perf_counter() - start)
    return batch_rate, single_rate


def _one_mode(mode: str, root: Path, batches: int, singles: int) -> tuple[float, float]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.server_mode",
            "serve",
            "--mode",
            mode,
            "--store-dir",
            str(root / mode),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"{mode} server did not start: {line!r}")
        return _measure(line.split()[1], batches, singles)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(60)


def run(size: str) -> list[Result]:
    batches, singles = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-mode-"))
    try:
        sync_batch, sync_single = _one_mode("sync", root, batches, singles)
        aio_batch, aio_single = _one_mode("aio", root, batches, singles)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = Result(
        "server-mode",
        sync_single,
        aio_single,
        "msg/s",
        goal=1.0,
        details={
            "sync_batch": round(sync_batch),
            "aio_batch": round(aio_batch),
            "sync_concurrent": round(sync_single),
            "aio_concurrent": round(aio_single),
            "threads": THREADS,
            "batch": 256,
            "body_bytes": len(BODY),
        },
    )
    result.rows = [
        ("sync server, batch 256", f"{sync_batch:,.0f} msg/s", "1 client"),
        ("aio server, batch 256", f"{aio_batch:,.0f} msg/s", "1 client"),
        ("sync server, single sends", f"{sync_single:,.0f} msg/s", f"{THREADS} threads"),
        ("aio server, single sends", f"{aio_single:,.0f} msg/s", f"{THREADS} threads"),
    ]
    return [result]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.server_mode")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--mode", choices=["sync", "aio"], required=True)
    parser.add_argument("--store-dir", required=True)
    args = parser.parse_args()
    _serve(args.mode, args.store_dir)
