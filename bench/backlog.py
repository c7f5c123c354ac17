"""backlog: random-offset pull latency with a small vs a large backlog, and broker memory.

Does reading stay as fast when the store holds 10× more? Two stores are filled — full
size: 1M and 10M messages of 128 B in one topic of 8 queues; tiny: 10k and 50k — and a
broker process serves each. The bench then times single pulls (``max_count = 1``, no
bounds queries), each of one message at a random offset of a random queue, interleaving
the two brokers in random order so that load from elsewhere on the machine falls on both
alike. Each pull is checked to return the message at the offset asked for.

How the backlog is built: filling 10M messages through gRPC would take minutes, so the
bench opens each store directly (``MessageStore.put_messages``, batches of 4,096, every
message with its own UNIQ_KEY message id as a producer would send, so the index is
filled too), closes it cleanly, then starts the broker on the same directory with the
same store settings (full size: the defaults, 1 GiB segments; tiny: 64 MiB segments,
only to be quick). The broker's start-up time (recovery from the clean checkpoint) is
reported as ``start_s``. The pages just written are in the page cache,
so this measures the read path, not the disk.

Result semantics (lower is better): ``ours`` is the p99 at the large backlog and
``baseline`` the p99 at the small one, in ms; ``ratio`` = large / small, goal ≤ 1.2. A
second condition, ``checks["broker RSS < 1 GiB"]``, holds the large broker's VmRSS
(read from ``/proc/<pid>/status`` after the pulls) under 1 GiB.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import Result, percentiles_ms
from broker_core.client import RocketMQClient
from broker_core.config import GIB, StoreConfig, from_mapping
from broker_core.message import PROPERTY_UNIQ_KEY, Message, new_message_id
from broker_core.server.launcher import BrokerProcess, launch_broker
from broker_core.store.message_store import MessageStore

BODY_BYTES = 128
QUEUES = 8
FILL_BATCH = 4_096
TOPIC = "bench-backlog"
GROUP = "GID_bench_backlog"
RSS_LIMIT_BYTES = 1 * GIB
SEED = 20_240_601
SIZES = {"tiny": (10_000, 50_000, 300), "full": (1_000_000, 10_000_000, 5_000)}
# (small backlog, large backlog, timed pulls per broker)
STORE: dict[str, dict[str, int]] = {"tiny": {"segment_size_bytes": 64 << 20}, "full": {}}
# store settings of filler and broker alike; full: the defaults (1 GiB segments)


def fill(store_dir: Path, count: int, settings: dict[str, int]) -> float:
    """Append ``count`` messages round robin over the queues; returns messages/s."""
    store = MessageStore(
        from_mapping(
            StoreConfig,
            {
                "store_dir": str(store_dir),
                "max_dispatch_lag_bytes": 1 << 40,
                "max_flush_lag_bytes": 1 << 40,
                **settings,
            },
        )
    )
    store.open()
    try:
        body = bytes(range(BODY_BYTES))
        start = time.perf_counter()
        for first in range(0, count, FILL_BATCH):
            store.put_messages(
                [
                    Message(
                        TOPIC,
                        body,
                        queue_id=i % QUEUES,
                        properties={PROPERTY_UNIQ_KEY: new_message_id()},
                    )
                    for i in range(first, min(first + FILL_BATCH, count))
                ]
            )
        store.wait_dispatched(600)
        return count / (time.perf_counter() - start)
    finally:
        store.close()


def rss_bytes(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of a process, in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            found[name] = int(value.split()[0]) * 1024  # the file says kB
    return found


def _probe(clients: list[RocketMQClient], per_queue: list[int], samples: int) -> list[list[int]]:
    """``samples`` timed single pulls per client, interleaved; latencies in ns."""
    rng = random.Random(SEED)
    latencies: list[list[int]] = [[] for _ in clients]
    order = list(range(len(clients)))
    for _ in range(samples):
        rng.shuffle(order)
        for i in order:
            queue_id, offset = rng.randrange(QUEUES), rng.randrange(per_queue[i])
            start = time.perf_counter_ns()
            batch = clients[i].pull(GROUP, TOPIC, queue_id, offset, 1, with_bounds=False)
            latencies[i].append(time.perf_counter_ns() - start)
            got = batch.messages[0].queue_offset if batch.messages else None
            if got != offset:
                raise RuntimeError(f"pull of {TOPIC}:{queue_id}@{offset} returned {got}")
    return latencies


@dataclass
class _Backlog:
    """What one backlog size measured."""

    count: int
    fill_msg_s: float
    start_s: float
    latencies_ns: list[int]
    rss: dict[str, int]


def _start(workdir: Path, settings: dict[str, int]) -> tuple[BrokerProcess, float]:
    start = time.perf_counter()
    broker = launch_broker(workdir, config={"store": settings})  # the filler's settings
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic(TOPIC, queues=QUEUES)
    return broker, time.perf_counter() - start


def _measure(
    root: Path, counts: tuple[int, ...], samples: int, settings: dict[str, int]
) -> list[_Backlog]:
    fill_rates = [fill(root / f"b{count}" / "store", count, settings) for count in counts]
    brokers: list[BrokerProcess] = []
    try:
        starts = []
        for count in counts:
            broker, seconds = _start(root / f"b{count}", settings)
            brokers.append(broker)
            starts.append(seconds)
        clients = [RocketMQClient(b.endpoint) for b in brokers]
        per_queue = [count // QUEUES for count in counts]
        _probe(clients, per_queue, max(20, samples // 10))  # warm-up: connections, code
        latencies = _probe(clients, per_queue, samples)
        rss = [rss_bytes(b.process.pid) for b in brokers]
        for client in clients:
            client.close()
    finally:
        for broker in brokers:
            broker.stop()
    return [
        _Backlog(*fields) for fields in zip(counts, fill_rates, starts, latencies, rss, strict=True)
    ]


def run(size: str) -> list[Result]:
    small_count, large_count, samples = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-backlog-"))
    try:
        small, large = _measure(root, (small_count, large_count), samples, STORE[size])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    p_small, p_large = percentiles_ms(small.latencies_ns), percentiles_ms(large.latencies_ns)
    result = Result(
        "backlog",
        p_large["p99"],
        p_small["p99"],
        "ms",
        goal=1.2,
        higher_is_better=False,
        baseline_name=f"ours at {small_count:,}",
        details={
            "backlogs": [small_count, large_count],
            "queues": QUEUES,
            "body_bytes": BODY_BYTES,
            "pulls_per_broker": samples,
            "small_ms": p_small,
            "large_ms": p_large,
            "rss_small_bytes": small.rss,
            "rss_large_bytes": large.rss,
            "rss_limit_bytes": RSS_LIMIT_BYTES,
            "fill_msg_s": [round(small.fill_msg_s), round(large.fill_msg_s)],
            "start_s": [round(small.start_s, 2), round(large.start_s, 2)],
            "fill": "MessageStore.put_messages in the bench process, then the broker on it",
            "store": STORE[size] or "defaults",
        },
        checks={"broker RSS < 1 GiB": large.rss["VmRSS"] < RSS_LIMIT_BYTES},
    )
    result.rows = [
        *(
            (f"{b.count:,} backlog {name}", f"{p[name]:.3f} ms", "random-offset single pull")
            for b, p in ((small, p_small), (large, p_large))
            for name in ("p50", "p99")
        ),
        *(
            (
                f"{b.count:,} backlog broker RSS",
                f"{b.rss['VmRSS'] / 2**20:,.0f} MiB",
                f"anon {b.rss['RssAnon'] / 2**20:,.0f} MiB, "
                f"file {b.rss['RssFile'] / 2**20:,.0f} MiB",
            )
            for b in (small, large)
        ),
    ]
    return [result]
