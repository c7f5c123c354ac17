"""format("rocketmq") through Spark Connect: a client session from
``SparkSession.builder.remote("sc://127.0.0.1:PORT")`` against pyspark's
``sbin/start-connect-server.sh`` bound to loopback. The server's Python workers import
the connector (PYSPARK_PYTHON is this venv); the client needs ``pyspark[connect]``'s extras.

Batch write (mode append), batch read with exact offsets, and an availableNow stream
from one topic into another, checked with our client.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

from broker_core.client import RocketMQClient
from tests.connector.conftest import BrokerProcess, new_topic
from tests.spark_cluster import SPARK_HOME, free_port, spark_env


def wait_for_port(port: int, timeout_s: float, log_dir: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    logs = "".join(p.read_text(errors="replace")[-3000:] for p in log_dir.glob("*.out"))
    raise TimeoutError(f"Spark Connect server not listening on {port}: {logs}")


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server (local[2]) on a free loopback port; stopped after the module."""
    run_dir = tmp_path_factory.mktemp("spark-connect")
    port, env = free_port(), spark_env(run_dir)
    sbin = SPARK_HOME / "sbin"
    subprocess.run(
        [
            str(sbin / "start-connect-server.sh"),
            "--master",
            "local[2]",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        wait_for_port(port, 120.0, run_dir / "logs")
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run(
            [str(sbin / "stop-connect-server.sh")],
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[SparkSession]:
    # The Connect builder itself: pyspark's generic builder refuses a remote session while
    # this process runs a classic one (SESSION_ALREADY_EXIST), as the rest of the slow
    # suite's shared local session is.
    session = cast(SparkSession, RemoteSparkSession.builder.remote(connect_url).getOrCreate())
    yield session
    session.stop()


def bodies(client: RocketMQClient, topic: str) -> list[bytes]:
    out: list[bytes] = []
    for q in client.query_route(topic):
        out += [m.body for m in client.pull("inspector", topic, q.queue_id, 0, 100).messages]
    return sorted(out)


@pytest.mark.slow
def test_write_read_and_stream_through_spark_connect(
    remote: SparkSession, client: RocketMQClient, broker: BrokerProcess, tmp_path: Path
) -> None:
    source, copy = new_topic(client, "sc-in"), new_topic(client, "sc-out")
    expected = [f"m-{i}".encode() for i in range(6)]
    (
        remote.createDataFrame([(b.decode(),) for b in expected], "body string")
        .write.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", source)
        .mode("append")
        .save()
    )
    assert bodies(client, source) == expected

    rows = (
        remote.read.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", source)
        .load()
        .select("queueId", "queueOffset", "body")
        .collect()
    )
    assert sorted(bytes(r["body"]) for r in rows) == expected
    per_queue: dict[int, list[int]] = {}
    for r in rows:
        per_queue.setdefault(r["queueId"], []).append(r["queueOffset"])
    assert {q: sorted(o) for q, o in per_queue.items()} == {
        q: list(range(len(o))) for q, o in per_queue.items()
    }

    query = (
        remote.readStream.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("body")
        .writeStream.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    # Through Connect the progress JSON has no top-level numInputRows (p["numInputRows"] is
    # None); the property sums the sources'.
    assert sum(p.numInputRows for p in query.recentProgress) == len(expected)
    assert bodies(client, copy) == expected
