"""The acceptance scenario of issue 13 item 14, with the CPUs kept busy.

A batch read, then a ``maxMessagesPerTrigger=3000`` available-now stream into a Parquet
sink, then more sends and a restart from the checkpoint: each stage must finish within
its deadline while busy-loop processes (low priority, one per core) compete for the CPU.
A stage that hangs fails the test (``await_query`` stops the query) instead of running on.
Slow: about 25 s on an idle machine, over 2 minutes on a loaded one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from tests.connector.conftest import BrokerProcess, await_query, new_topic, read_batch

STAGE_DEADLINE_S = 120


@pytest.fixture
def busy_cpus() -> Iterator[list[subprocess.Popen[bytes]]]:
    """One busy-looping process per core, at the lowest priority."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19))
        for _ in range(os.cpu_count() or 2)
    ]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait(10)


def archive(
    spark: SparkSession, endpoint: str, topic: str, out: Path, checkpoint: Path
) -> list[int]:
    """One available-now run into Parquet; the input rows of each batch."""
    query = (
        spark.readStream.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "3000")
        .load()
        .select("queueId", "queueOffset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    started = time.monotonic()
    await_query(query, STAGE_DEADLINE_S)
    assert time.monotonic() - started < STAGE_DEADLINE_S
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def send(client: RocketMQClient, topic: str, prefix: str, count: int) -> None:
    for start in range(0, count, 1500):
        client.send_batch(
            topic,
            [
                f"{prefix}-{i}".encode().ljust(100, b".")
                for i in range(start, min(count, start + 1500))
            ],
        )


@pytest.mark.slow
def test_available_now_stream_finishes_under_cpu_contention(
    spark: SparkSession,
    broker: BrokerProcess,
    client: RocketMQClient,
    tmp_path: Path,
    busy_cpus: list[subprocess.Popen[bytes]],
) -> None:
    topic = new_topic(client, "contention", queues=4)
    send(client, topic, "a", 7500)
    assert read_batch(spark, broker.endpoint, topic=topic).count() == 7500

    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    assert archive(spark, broker.endpoint, topic, out, checkpoint) == [3000, 3000, 1500]
    send(client, topic, "b", 3000)
    assert archive(spark, broker.endpoint, topic, out, checkpoint) == [3000]  # only the new

    rows = spark.read.parquet(str(out)).select("queueId", "queueOffset").collect()
    assert len(rows) == 10_500 and len(set(rows)) == 10_500
    assert all(proc.poll() is None for proc in busy_cpus), "the busy loops ran throughout"
