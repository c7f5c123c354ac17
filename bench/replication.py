"""replication: produce throughput and latency with sync replication vs none, same run.

Three set-ups, each started fresh on loopback and measured with the same client work:

* ``none``: one broker, no broker group (the baseline);
* ``async``: a master and one slave, ``replication = async`` (acked at once);
* ``sync``: a master and one slave, ``replication = sync`` (acked once the in-sync slave
  stored the bytes: the slave's report is on the send's path).

Client work: batches of 256 messages of 128 B (``send_batch``, one request each, acked
before the next), then single 128 B sends one after the other, each timed. Every broker
uses the default async flush. The result is sync's batch throughput over none's
(``ratio``, higher is better; goal ≥ 0.5: sync replication costs at most half); rates,
single-send latency percentiles and the in-sync check of every set-up are in the details.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Result, percentiles_ms
from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker

BATCH = 256
BODY_BYTES = 128
SIZES = {"tiny": (8, 200), "full": (300, 3_000)}  # (batches, single sends)
TOPIC = "bench-replication"
GOAL = 0.5


def _start(workdir: Path, mode: str) -> list[BrokerProcess]:
    """The brokers of one set-up; the first is where producers send."""
    if mode == "none":
        return [launch_broker(workdir / "solo")]
    ha = {"ha_heartbeat_interval_ms": 500}
    master = launch_broker(
        workdir / "master",
        config={
            "broker": {
                "broker_name": "bench",
                "ha_listen": "127.0.0.1:0",
                "replication": mode,
                **ha,
            }
        },
    )
    slave = launch_broker(
        workdir / "slave",
        config={
            "broker": {
                "broker_name": "bench",
                "broker_id": 1,
                "ha_master": master.ha_endpoint,
                **ha,
            }
        },
    )
    return [master, slave]


def _wait_in_sync(client: RocketMQClient, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not client.health()["replication"].get("in_sync"):
        if time.monotonic() > deadline:
            raise RuntimeError("the slave never joined the in-sync set")
        time.sleep(0.05)


def _measure(workdir: Path, mode: str, batches: int, singles: int) -> dict[str, Any]:
    brokers = _start(workdir / mode, mode)
    try:
        with RocketMQClient(brokers[0].endpoint, max_attempts=1) as client:
            client.create_topic(TOPIC, queues=8)
            if mode != "none":
                _wait_in_sync(client)
            body = bytes(range(BODY_BYTES))
            client.send_batch(TOPIC, [body] * BATCH)  # warm-up
            start = time.perf_counter()
            for _ in range(batches):
                client.send_batch(TOPIC, [body] * BATCH)
            rate = batches * BATCH / (time.perf_counter() - start)
            samples: list[int] = []
            for _ in range(singles):
                t0 = time.perf_counter_ns()
                client.send(TOPIC, body)
                samples.append(time.perf_counter_ns() - t0)
            in_sync = client.health()["replication"].get("in_sync", {})
        return {
            "msg_s": rate,
            "latency_ms": percentiles_ms(samples),
            "slave_in_sync_at_end": bool(in_sync) if mode != "none" else None,
        }
    finally:
        for broker in reversed(brokers):
            broker.stop()


def run(size: str) -> list[Result]:
    batches, singles = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    try:
        figures = {
            mode: _measure(root, mode, batches, singles) for mode in ("none", "async", "sync")
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sync, none = figures["sync"]["msg_s"], figures["none"]["msg_s"]
    result = Result(
        "replication",
        sync,
        none,
        "msg/s",
        goal=GOAL,
        baseline_name="no replication",
        details={
            "batches": batches,
            "batch": BATCH,
            "body_bytes": BODY_BYTES,
            "single_sends": singles,
            "setups": figures,
            "figures": {f"{mode} replication": f["msg_s"] for mode, f in figures.items()},
        },
        checks={
            "slave in sync throughout (async, sync)": all(
                figures[m]["slave_in_sync_at_end"] for m in ("async", "sync")
            )
        },
    )
    result.rows = [
        (
            f"{mode} replication",
            f"{f['msg_s']:,.0f} msg/s",
            "single send p50 {p50} ms, p99 {p99} ms".format(**f["latency_ms"]),
        )
        for mode, f in figures.items()
    ]
    return [result]
