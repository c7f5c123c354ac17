"""spark_jobs on a real Spark standalone cluster (master + workers on loopback, started by
pyspark's spark-daemon.sh), submitted with spark-submit against a real broker.

The single-host setup of the README: the project is installed in the venv that
``PYSPARK_PYTHON`` points at (no ``--py-files``), so the streaming source's planner, which
runs in a Python process the driver JVM starts, imports ``pyspark_rocketmq`` too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from broker_core.client import OutgoingMessage, RocketMQClient
from tests.connector.conftest import BrokerProcess, new_topic
from tests.spark_cluster import StandaloneCluster
from tests.spark_jobs.test_jobs import EVENTS, EXPECTED, event, results

ROOT = Path(__file__).resolve().parents[2]


def run_both_jobs(
    cluster: StandaloneCluster, broker: BrokerProcess, client: RocketMQClient, work: Path
) -> Path:
    """Submit order_events and archive; check order_events' results; return archive's output."""
    source, sink = new_topic(client, "orders"), new_topic(client, "stats")
    client.send_batch(source, [OutgoingMessage(event(i, *e)) for i, e in enumerate(EVENTS)])
    done = cluster.submit(
        ROOT / "spark_jobs" / "order_events.py",
        "--endpoints",
        broker.endpoint,
        "--input-topic",
        source,
        "--output-topic",
        sink,
        "--checkpoint",
        str(work / "ckpt-orders"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = {
        (r["window_start"], r["status"]): (r["orders"], r["revenue_cents"])
        for r in results(client, sink)
    }
    assert got == EXPECTED
    out = work / "archive"
    done = cluster.submit(
        ROOT / "spark_jobs" / "archive.py",
        "--endpoints",
        broker.endpoint,
        "--topic",
        source,
        "--output",
        str(out),
        "--checkpoint",
        str(work / "ckpt-archive"),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    apps = cluster.state()["completedapps"]
    assert len(apps) == 2 and all(a["state"] == "FINISHED" for a in apps), apps
    # Both applications ran an executor on every worker.
    assert cluster.executors_per_worker() == [2] * cluster.workers
    return out


@pytest.mark.slow
def test_jobs_on_a_two_worker_cluster(
    broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    cluster = StandaloneCluster(tmp_path / "spark", workers=2)
    try:
        cluster.start()
        out = run_both_jobs(cluster, broker, client, tmp_path)
    finally:
        cluster.stop()
    rows = pq.read_table(out).to_pylist()  # pyarrow skips _spark_metadata
    assert sorted(json.loads(r["body"])["order_id"] for r in rows) == sorted(
        f"o-{i}" for i in range(len(EVENTS))
    )
    assert len({(r["queueId"], r["queueOffset"]) for r in rows}) == len(EVENTS)
