"""consume: drain a backlog by offset pull, ours vs Redis Streams XREAD.

Both sides hold the same N messages of 128 bytes before the clock starts:

* ours: one topic with 8 queues, filled with ``RocketMQClient.send_batch`` (batches of
  1,024); drained queue by queue with the bulk pull ``RocketMQClient.pull_raw`` from
  offset 0 up to the queue's end offset, ``PULL_BATCH`` messages per call, each batch
  checked (sizes, CRCs, queue and order) and decoded into columns by
  ``columnar.decode_units`` + ``split_properties`` (message id, tag, keys, properties).
* Redis: one stream filled with pipelined XADDs (AOF ``appendfsync everysec``), drained
  with ``XREAD COUNT 10000`` from id ``0`` onwards, each call continuing after the last
  id it returned.

One client in one Python process on each side; every message is decoded by the client
library (our columns, redis-py's ``(id, fields)`` tuples), so both sides pay for parsing.
Throughput is messages per second over the whole drain.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.peers import redis_client, start_redis
from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.client.columnar import check_placement, decode_units, split_properties
from broker_core.server.launcher import launch_broker

BODY_BYTES = 128
QUEUES = 8
FILL_BATCH = 1_024
PULL_BATCH = 10_000  # the same as Redis's XREAD COUNT
TOPIC = "bench-consume"
GROUP = "GID_bench_consume"
SIZES = {"tiny": 4_000, "full": 1_000_000}
GOAL = 2.0  # issue 14: ≥ 2× Redis XREAD with hiredis


def drain(client: RocketMQClient, topic: str, queues: int) -> int:
    """Read every message of ``topic`` by offset pull; returns how many were read.

    Every batch is verified and decoded in full (see the module docstring).
    """
    read = 0
    for queue_id in range(queues):
        end = client.query_offset(topic, queue_id, "END")
        offset = 0
        while offset < end:
            batch = client.pull_raw(GROUP, topic, queue_id, offset, min(PULL_BATCH, end - offset))
            cols = decode_units(batch.data, batch.sizes)
            check_placement(cols, topic, queue_id, offset)
            split_properties(cols)
            read += cols.count
            offset = batch.next_offset
    return read


def _ours(workdir: Path, count: int, body: bytes) -> float:
    broker = launch_broker(
        workdir,
        config={
            "store": {"segment_size_bytes": 256 << 20},
        },
    )
    try:
        with RocketMQClient(broker.endpoint, timeout_s=60) as client:
            client.create_topic(TOPIC, queues=QUEUES)
            for start in range(0, count, FILL_BATCH):
                client.send_batch(TOPIC, [body] * min(FILL_BATCH, count - start))
            started = time.perf_counter()
            read = drain(client, TOPIC, QUEUES)
            elapsed = time.perf_counter() - started
        if read != count:
            raise RuntimeError(f"drained {read} messages, expected {count}")
        return count / elapsed
    finally:
        broker.stop()


def _redis_drain(conn: Any, stream: str, count: int) -> int:
    read, last_id = 0, b"0"
    while read < count:
        answer = conn.xread({stream: last_id}, count=PULL_BATCH)
        if not answer:
            break
        entries = answer[0][1]
        read += len(entries)
        last_id = entries[-1][0]
    return read


def _redis(workdir: Path, count: int, body: bytes) -> float:
    peer = start_redis(workdir)
    try:
        conn = redis_client(peer.port)
        for start in range(0, count, FILL_BATCH):
            pipe = conn.pipeline(transaction=False)
            for _ in range(min(FILL_BATCH, count - start)):
                pipe.xadd(TOPIC, {"body": body})
            pipe.execute()
        started = time.perf_counter()
        read = _redis_drain(conn, TOPIC, count)
        elapsed = time.perf_counter() - started
        conn.close()
        if read != count:
            raise RuntimeError(f"Redis drained {read} entries, expected {count}")
        return count / elapsed
    finally:
        peer.stop()


def run(size: str) -> list[Result]:
    count = SIZES[size]
    body = bytes(range(BODY_BYTES))
    root = Path(tempfile.mkdtemp(prefix="bench-consume-"))
    try:
        ours = _ours(root / "ours", count, body)
        redis_rate = _redis(root / "redis", count, body)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = Result(
        "consume",
        ours,
        redis_rate,
        "msg/s",
        goal=GOAL,
        baseline_name="Redis XREAD",
        details={
            "messages": count,
            "body_bytes": BODY_BYTES,
            "queues": QUEUES,
            "pull_batch": PULL_BATCH,
            "fill_batch": FILL_BATCH,
            "figures": {"ours": round(ours), "Redis XREAD": round(redis_rate)},
        },
    )
    result.rows = [
        (
            "ours (offset pull)",
            f"{ours:,.0f} msg/s",
            f"{count:,} × {BODY_BYTES} B, {QUEUES} queues, {PULL_BATCH:,} per pull",
        ),
        ("Redis Streams XREAD", f"{redis_rate:,.0f} msg/s", f"COUNT {PULL_BATCH:,} from id 0"),
    ]
    return [result]
