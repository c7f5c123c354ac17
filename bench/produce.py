"""produce: gRPC batch sends into our broker vs Redis Streams XADD and JetStream publish.

Every side gets the same work: batches of 256 messages of 128 bytes, one client in one
Python process:

* ours: one bulk send (``rmq.bulk.v1.Bulk/SendBulk``, columns) per batch, ``IN_FLIGHT``
  requests in flight; and the same client with ``bulk=False``, one official SendMessage
  request with 256 entries per batch (``official_msg_s``, and its share of the no-op
  broker ceiling, ``official_share_of_ceiling``);
* Redis: a redis-py pipeline of 256 XADDs (one round trip), AOF ``appendfsync everysec``;
* JetStream: nats-py (asyncio) ``publish_async`` of 256 messages, then wait for the 256
  acks (pipelined on one connection, so also about one round trip), file storage.

Two ceilings price the floor. The raw transport ceiling (``bench/transport_ceiling.py``):
a grpcio client sending the bytes of our 256-message SendMessage request, pre-encoded,
to a server that drops them, with as many requests in flight as our client keeps
(``IN_FLIGHT``); ``share_of_ceiling`` is ours over it. And our client against
``bench/noop_broker.py``, a gRPC server that answers every SendMessage without storing
anything. No broker behind grpcio can be faster with this client; the gap to it is the
broker's own work.

Our broker runs as its own process with the default async flush. Throughput is messages
per second over the timed batches, after a warm-up batch on each side. The ratio (and the
goal, ≥ 2.5) is against Redis; the result also checks the bulk send's share of the
transport ceiling (≥ 0.5) and the SendMessage path's share of the no-op broker (≥ 0.8).
The JetStream figure is reported beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import transport_ceiling
from bench.peers import redis_client, start_nats, start_redis
from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.client.wire import encode_messages
from broker_core.server.launcher import launch_broker

BATCH = 256
BODY_BYTES = 128
SIZES = {"tiny": 8, "full": 400}  # batches per side
IN_FLIGHT = 5  # requests our produce client keeps in flight (the ceiling gets the same)
GOAL = 2.5  # issue 14: ≥ 2.5× Redis XADD pipelined, and the two shares below
CEILING_SHARE_GOAL = 0.5  # of the raw transport ceiling
OFFICIAL_SHARE_GOAL = 0.8  # the official SendMessage path, of the no-op broker


def _ours(workdir: Path, batches: int, body: bytes) -> tuple[float, float]:
    """(bulk send msg/s, official SendMessage msg/s) of our client against one broker."""
    broker = launch_broker(workdir, config={"broker": {"default_queue_nums": 8}})
    try:
        with RocketMQClient(broker.endpoint, max_in_flight=IN_FLIGHT) as client:
            client.create_topic("bench-produce", queues=8)
            bulk = _send_rate(client, batches, body)
        with RocketMQClient(broker.endpoint, max_in_flight=IN_FLIGHT, bulk=False) as client:
            official = _send_rate(client, batches, body)
        return bulk, official
    finally:
        broker.stop()


def _send_rate(client: RocketMQClient, batches: int, body: bytes) -> float:
    """msg/s of ``batches`` batch sends, ``IN_FLIGHT`` outstanding, after a warm-up batch."""
    batch = [body] * BATCH
    client.send_batch("bench-produce", batch)
    start = time.perf_counter()
    for _ in range(batches):
        client.send_batch_async("bench-produce", batch)
    client.flush()
    return batches * BATCH / (time.perf_counter() - start)


def _noop(batches: int, body: bytes) -> float:
    """Our client against a broker that stores nothing (``bench/noop_broker.py``)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.noop_broker"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with RocketMQClient(f"127.0.0.1:{port}", max_in_flight=IN_FLIGHT) as client:
            return _send_rate(client, batches, body)
    finally:
        proc.kill()
        proc.wait()


def _redis(workdir: Path, batches: int, body: bytes) -> float:
    peer = start_redis(workdir)
    try:
        conn = redis_client(peer.port)
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


def _jetstream(workdir: Path, batches: int, body: bytes) -> float:
    import asyncio

    peer = start_nats(workdir)
    try:
        return asyncio.run(_jetstream_batches(peer.port, batches, body))
    finally:
        peer.stop()


async def _jetstream_batches(port: int, batches: int, body: bytes) -> float:
    import asyncio

    import nats

    conn = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = conn.jetstream()
        await js.add_stream(name="BENCH", subjects=["bench.produce"])  # file storage

        async def batch() -> None:
            acks = [await js.publish_async("bench.produce", body) for _ in range(BATCH)]
            await asyncio.gather(*acks)

        await batch()  # warm-up
        start = time.perf_counter()
        for _ in range(batches):
            await batch()
        return batches * BATCH / (time.perf_counter() - start)
    finally:
        await conn.close()


def run(size: str) -> list[Result]:
    batches = SIZES[size]
    body = bytes(range(BODY_BYTES))
    root = Path(tempfile.mkdtemp(prefix="bench-produce-"))
    try:
        ours, official = _ours(root / "ours", batches, body)
        noop = _noop(batches, body)
        request, _count = encode_messages("bench-produce", [body] * BATCH)
        ceiling = transport_ceiling.measure(request, BATCH, batches, IN_FLIGHT)
        redis_rate = _redis(root / "redis", batches, body)
        js_rate = _jetstream(root / "nats", batches, body)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = Result(
        "produce",
        ours,
        redis_rate,
        "msg/s",
        goal=GOAL,
        baseline_name="Redis XADD",
        checks={
            f"bulk send ≥ {CEILING_SHARE_GOAL}× transport ceiling": ours / ceiling
            >= CEILING_SHARE_GOAL,
            f"SendMessage ≥ {OFFICIAL_SHARE_GOAL}× no-op broker": official / noop
            >= OFFICIAL_SHARE_GOAL,
        },
        details={
            "batches": batches,
            "batch": BATCH,
            "body_bytes": BODY_BYTES,
            "peer": "redis XADD",
            "jetstream_msg_s": round(js_rate),
            "ratio_vs_jetstream": round(ours / js_rate, 3),
            "noop_broker_msg_s": round(noop),
            "noop_broker_ratio": round(noop / redis_rate, 3),
            "transport_ceiling_msg_s": round(ceiling),
            "share_of_ceiling": round(ours / ceiling, 3),
            "official_msg_s": round(official),
            "official_share_of_ceiling": round(official / noop, 3),
            "transport_request_bytes": len(request),
            "in_flight": IN_FLIGHT,
            "flush": "ours async; Redis AOF everysec; JetStream file store defaults",
            "figures": {
                "ours": ours,
                "ours (SendMessage)": official,
                "Redis XADD": redis_rate,
                "JetStream": js_rate,
                "no-op broker": noop,
                "transport ceiling": ceiling,
            },
        },
    )
    result.rows = [
        (
            "ours (bulk send)",
            f"{ours:,.0f} msg/s",
            f"{batches} × {BATCH} × {BODY_BYTES} B, {IN_FLIGHT} in flight",
        ),
        ("ours (official SendMessage)", f"{official:,.0f} msg/s", "same client, bulk=False"),
        ("Redis Streams XADD", f"{redis_rate:,.0f} msg/s", "pipelined, AOF everysec"),
        ("JetStream publish", f"{js_rate:,.0f} msg/s", "publish_async, 256 acks per batch"),
        (
            "no-op broker (ceiling)",
            f"{noop:,.0f} msg/s",
            "our client vs a gRPC server that stores nothing",
        ),
        (
            "raw transport ceiling",
            f"{ceiling:,.0f} msg/s",
            f"{len(request):,} B pre-encoded, dropped; ours is {ours / ceiling:.2f} of it",
        ),
    ]
    return [result]
