"""topics: produce throughput with 64 topics × 8 queues, then 256 topics × 8 queues.

The same batch send as ``produce`` (batches of 256 messages of 128 bytes, one client, one
SendMessage per batch, async flush), but the batches go round robin over many topics of
8 queues each, so the broker keeps 512, then 2,048 consume queues open and growing. The
question is whether throughput holds as the number of queues grows; the baseline is our
own figure at 64 topics, ``ratio`` = rate at 256 topics / rate at 64 topics, goal ≥ 0.95.

Each topic count gets a fresh broker. Topics are created and each receives one untimed
batch first, so their consume-queue files exist before the clock starts; then the same
number of batches is timed for both counts. The two counts alternate over ``ROUNDS``
rounds and each keeps its median, so a burst of load from elsewhere on the machine does
not decide the ratio. The untimed set-up (creating the topics and their first batch) is
reported as ``setup_s``: it is where a per-queue cost shows.

``--size tiny`` (the smoke test) runs one round of 16 vs 64 topics, with consume-queue
files of 10,000 units instead of the default 300,000, only so that it takes seconds.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.server.launcher import launch_broker

BATCH = 256
BODY_BYTES = 128
QUEUES = 8
COUNTS = {"tiny": (16, 64), "full": (64, 256)}  # topics in the baseline run, the measured one
ROUNDS = 3
SIZES = {"tiny": 64, "full": 768}  # timed batches per run
TINY_STORE = {"consume_queue_units_per_file": 10_000}


def _rate(workdir: Path, topics: int, batches: int, store: dict[str, int]) -> tuple[float, float]:
    """(msg/s of ``batches`` batch sends round robin over ``topics`` topics, set-up s)."""
    broker = launch_broker(workdir, config={"store": {"segment_size_bytes": 256 << 20, **store}})
    try:
        with RocketMQClient(broker.endpoint) as client:
            names = [f"bench-topics-{i:03d}" for i in range(topics)]
            batch = [bytes(range(BODY_BYTES))] * BATCH
            start = time.perf_counter()
            for name in names:
                client.create_topic(name, queues=QUEUES)
                client.send_batch(name, batch)  # warm-up: the topic's queues exist
            setup_s = time.perf_counter() - start
            start = time.perf_counter()
            for i in range(batches):
                client.send_batch(names[i % topics], batch)
            return batches * BATCH / (time.perf_counter() - start), setup_s
    finally:
        broker.stop()


def run(size: str) -> list[Result]:
    batches, counts = SIZES[size], COUNTS[size]
    rounds, store = (1, TINY_STORE) if size == "tiny" else (ROUNDS, {})
    root = Path(tempfile.mkdtemp(prefix="bench-topics-"))
    rates: dict[int, list[float]] = {count: [] for count in counts}
    setup_s: dict[int, list[float]] = {count: [] for count in counts}
    try:
        for round_no in range(rounds):
            for count in counts:
                workdir = root / f"t{count}-{round_no}"
                rate, seconds = _rate(workdir, count, batches, store)
                rates[count].append(rate)
                setup_s[count].append(seconds)
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    few, many = (statistics.median(rates[count]) for count in counts)
    result = Result(
        "topics",
        many,
        few,
        "msg/s",
        goal=0.95,
        baseline_name=f"ours, {counts[0]} topics",
        details={
            "topic_counts": list(counts),
            "queues_per_topic": QUEUES,
            "batches": batches,
            "batch": BATCH,
            "body_bytes": BODY_BYTES,
            "rounds": rounds,
            "rates_msg_s": {str(count): [round(r) for r in rates[count]] for count in counts},
            "setup_s": {str(count): [round(s, 2) for s in setup_s[count]] for count in counts},
            "store": store or "defaults",
            "figures": {
                f"ours, {count} topics": round(rate)
                for count, rate in zip(counts, (few, many), strict=True)
            },
        },
    )
    result.rows = [
        (
            f"{count} topics × {QUEUES} queues",
            f"{rate:,.0f} msg/s",
            f"median of {rounds}, {batches} × {BATCH} × {BODY_BYTES} B",
        )
        for count, rate in zip(counts, (few, many), strict=True)
    ]
    return [result]
