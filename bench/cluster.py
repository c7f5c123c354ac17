"""cluster: produce throughput through 2 broker groups vs 1, and the route lookup per send.

One run starts a NameServer and two broker groups (``LocalCluster``). Two topics: one
with 8 queues on broker-a only, one with 8 queues on each group. The same sender —
``SENDERS`` processes, each a ``RocketMQClient(namesrv=...)`` sending batches of 256
messages of 128 B one after the other — runs against each topic, alternating rounds
(1 group, 2 groups, 1, 2, ...) so drift on a shared machine hits both alike. The figure
is the best round's aggregate msg/s of each; the ratio is 2 groups over 1.

The route lookup cost is measured twice: in-process, the cluster client's per-send
routing step (cached route, pick a group, pick its client) in µs; and end to end,
single-message sends to broker-a by a single-broker client (``endpoints=``) against the
cluster client (``namesrv=``), alternating rounds, median of the per-round ratios. The
check: the cluster client's single send is at most 5 % slower.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.report import Result
from broker_core.cli_cluster import create_topic_everywhere
from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster

BATCH = 256
BODY_BYTES = 128
SENDERS = 2
SIZES = {"tiny": (6, 2, 200), "full": (150, 5, 3000)}  # batches/round, rounds, single sends
MAX_OVERHEAD = 0.05


def _sender(namesrv: str, topic: str, batches: int, start_at: float) -> float:
    """Send ``batches`` batches (after a warm-up) from ``start_at``; seconds taken."""
    body = bytes(range(BODY_BYTES))
    with RocketMQClient(namesrv=namesrv) as client:
        client.send_batch(topic, [body] * BATCH)
        time.sleep(max(0.0, start_at - time.time()))
        start = time.perf_counter()
        for _ in range(batches):
            client.send_batch(topic, [body] * BATCH)
        return time.perf_counter() - start


def _round(pool: multiprocessing.pool.Pool, namesrv: str, topic: str, batches: int) -> float:
    """Aggregate msg/s of ``SENDERS`` concurrent senders."""
    start_at = time.time() + 1.0
    elapsed = pool.starmap(_sender, [(namesrv, topic, batches, start_at)] * SENDERS)
    return SENDERS * batches * BATCH / max(elapsed)


def _single_sends(client: RocketMQClient, topic: str, count: int) -> float:
    """µs per single-message send, after a warm-up."""
    body = bytes(range(BODY_BYTES))
    for _ in range(20):
        client.send_batch(topic, [body])
    start = time.perf_counter()
    for _ in range(count):
        client.send_batch(topic, [body])
    return (time.perf_counter() - start) / count * 1e6


def _routing_us(client: RocketMQClient, topic: str, count: int = 20_000) -> float:
    """µs per routing step of the cluster client (cached route, next group, its client)."""
    cluster = client.cluster
    assert cluster is not None
    start = time.perf_counter()
    for _ in range(count):
        cluster.send_routed(topic, lambda c: c)
    return (time.perf_counter() - start) / count * 1e6


def _measure(local: LocalCluster, size: str) -> dict[str, float]:
    batches, rounds, singles = SIZES[size]
    create_topic_everywhere(local.namesrv, "broker-a", "bench-one", queues=8)
    create_topic_everywhere(local.namesrv, None, "bench-two", queues=8)
    one, two = [], []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(SENDERS) as pool:
        for _ in range(rounds):
            one.append(_round(pool, local.namesrv, "bench-one", batches))
            two.append(_round(pool, local.namesrv, "bench-two", batches))
    direct_us, cluster_us, ratios = [], [], []
    with (
        RocketMQClient(local.endpoints["broker-a"]) as direct,
        RocketMQClient(namesrv=local.namesrv) as routed,
    ):
        for _ in range(rounds):
            direct_us.append(_single_sends(direct, "bench-one", singles))
            cluster_us.append(_single_sends(routed, "bench-one", singles))
            ratios.append(cluster_us[-1] / direct_us[-1])
        routing_us = _routing_us(routed, "bench-one")
    return {
        "one": max(one),
        "two": max(two),
        "direct_us": statistics.median(direct_us),
        "cluster_us": statistics.median(cluster_us),
        "overhead": statistics.median(ratios) - 1,
        "routing_us": routing_us,
    }


def run(size: str) -> list[Result]:
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    local = LocalCluster(root, broker_config={"broker": {"default_queue_nums": 8}})
    try:
        local.start(2)
        m = _measure(local, size)
    finally:
        local.stop()
        shutil.rmtree(root, ignore_errors=True)
    overhead_ok = m["overhead"] <= MAX_OVERHEAD
    result = Result(
        "cluster",
        m["two"],
        m["one"],
        "msg/s",
        goal=1.2,
        baseline_name="1 broker group",
        checks={f"cluster client's single send within {MAX_OVERHEAD:.0%}": overhead_ok},
        details={
            "senders": SENDERS,
            "batch": BATCH,
            "body_bytes": BODY_BYTES,
            "batches_per_round": SIZES[size][0],
            "rounds": SIZES[size][1],
            "single_send_direct_us": round(m["direct_us"], 1),
            "single_send_cluster_us": round(m["cluster_us"], 1),
            "single_send_overhead": round(m["overhead"], 4),
            "routing_step_us": round(m["routing_us"], 2),
            "figures": {"2 broker groups": m["two"], "1 broker group": m["one"]},
        },
    )
    result.rows = [
        ("2 broker groups", f"{m['two']:,.0f} msg/s", f"{SENDERS} senders, batch {BATCH}"),
        ("1 broker group", f"{m['one']:,.0f} msg/s", "same senders, same run"),
        ("single send, endpoints=", f"{m['direct_us']:,.0f} µs", "one broker, no routing"),
        (
            "single send, namesrv=",
            f"{m['cluster_us']:,.0f} µs",
            f"{m['overhead']:+.1%} (routing step {m['routing_us']:.2f} µs)",
        ),
    ]
    return [result]
