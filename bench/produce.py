"""produce: gRPC batch sends into our broker vs Redis Streams XADD, same client language.

Both sides get the same work: batches of 256 messages of 128 bytes, one client in one
Python process, each batch a single round trip (our SendMessage with 256 entries; a
redis-py pipeline of 256 XADDs). Our broker runs as its own process with the default
async flush; Redis runs with AOF ``appendfsync everysec``. Throughput is messages per
second over the timed batches, after a warm-up batch on each side.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.peers import start_redis
from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.server.launcher import launch_broker

BATCH = 256
BODY_BYTES = 128
SIZES = {"tiny": 8, "full": 400}  # batches per side


def _ours(workdir: Path, batches: int, body: bytes) -> float:
    broker = launch_broker(workdir, config={"broker": {"default_queue_nums": 8}})
    try:
        with RocketMQClient(broker.endpoint) as client:
            client.create_topic("bench-produce", queues=8)
            batch = [body] * BATCH
            client.send_batch("bench-produce", batch)  # warm-up
            start = time.perf_counter()
            for _ in range(batches):
                client.send_batch("bench-produce", batch)
            return batches * BATCH / (time.perf_counter() - start)
    finally:
        broker.stop()


def _redis(workdir: Path, batches: int, body: bytes) -> float:
    import redis

    peer = start_redis(workdir)
    try:
        conn = redis.Redis(host="127.0.0.1", port=peer.port)
        conn.xadd("warm", {"body": body})
        start = time.perf_counter()
        for _ in range(batches):
            pipe = conn.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd("bench-produce", {"body": body})
            pipe.execute()
        rate = batches * BATCH / (time.perf_counter() - start)
        conn.close()
        return rate
    finally:
        peer.stop()


def run(size: str) -> list[Result]:
    batches = SIZES[size]
    body = bytes(range(BODY_BYTES))
    root = Path(tempfile.mkdtemp(prefix="bench-produce-"))
    try:
        ours = _ours(root / "ours", batches, body)
        redis_rate = _redis(root / "redis", batches, body)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = Result("produce", ours, redis_rate, "msg/s", goal=1.5, details={
        "batches": batches, "batch": BATCH, "body_bytes": BODY_BYTES, "peer": "redis XADD",
    })  # fmt: skip
    result.rows = [
        ("ours (gRPC SendMessage)", f"{ours:,.0f} msg/s", f"{batches} × {BATCH} × {BODY_BYTES} B"),
        ("Redis Streams XADD", f"{redis_rate:,.0f} msg/s", "pipelined, AOF everysec"),
    ]
    return [result]
