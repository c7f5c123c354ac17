"""Shared fixtures of the connector tests: one SparkSession per run, one broker per module.

* ``spark`` (session): ``local[2]``, UI off, 2 shuffle partitions, UTC, Python filter
  pushdown on; its Python workers run this virtualenv's interpreter. Its JVM is started
  without fork() (:mod:`tests.connector.spark_gateway`). The ``rocketmq``
  format is never registered by hand: Spark finds ``pyspark_rocketmq.DefaultSource``.
* ``broker`` / ``client`` (module): a broker process on a loopback port and our client.
* helpers: :func:`new_topic` (a fresh topic per test), :func:`produce`,
  :func:`read_batch`, :func:`read_stream`, :func:`run_available_now`, :func:`await_query`.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

from broker_core.client import OutgoingMessage, RocketMQClient, SendReceipt
from tests.connector import spark_gateway
from tests.server.conftest import BrokerProcess, start_broker

__all__ = [
    "BrokerProcess",
    "StreamRun",
    "await_query",
    "new_topic",
    "produce",
    "read_batch",
    "read_stream",
    "run_available_now",
    "start_broker",
]

_NAMES = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep Spark's traffic on loopback
    conf = {
        "spark.master": "local[2]",
        "spark.app.name": "rocketmq-connector-tests",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.showConsoleProgress": "false",
    }
    gateway = spark_gateway.launch(conf)  # no fork() under gRPC: see spark_gateway
    try:
        session = spark_gateway.session_on(gateway, SparkSession.builder.config(map=conf))
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()
    finally:
        gateway.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker for the module (default config: 4 queues per auto-created topic)."""
    proc = start_broker(tmp_path_factory.mktemp("connector-broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint) as c:
        yield c


def new_topic(client: RocketMQClient, prefix: str = "t", *, queues: int = 2) -> str:
    """Create a topic no other test uses, with ``queues`` queues."""
    name = f"{prefix}-{next(_NAMES)}-{uuid.uuid4().hex[:6]}"
    client.create_topic(name, queues=queues)
    return name


def produce(
    client: RocketMQClient,
    topic: str,
    count: int,
    *,
    tag: str | None = None,
    prefix: str = "m",
    body_bytes: int = 0,
    keys: Sequence[str] = (),
    properties: dict[str, str] | None = None,
) -> list[SendReceipt]:
    """Send ``count`` messages in one request; bodies ``{prefix}-{i}`` (padded to
    ``body_bytes``). The broker spreads them over the queues round robin."""
    messages = [
        OutgoingMessage(f"{prefix}-{i}".encode().ljust(body_bytes, b"."), tag, keys, properties)
        for i in range(count)
    ]
    return client.send_batch(topic, messages)


def read_batch(spark: SparkSession, endpoint: str, **options: str) -> DataFrame:
    return spark.read.format("rocketmq").option("endpoints", endpoint).options(**options).load()


def read_stream(spark: SparkSession, endpoint: str, **options: str) -> DataFrame:
    return (
        spark.readStream.format("rocketmq").option("endpoints", endpoint).options(**options).load()
    )


@dataclass
class StreamRun:
    """What one available-now run saw: rows per batch id and the query's progress."""

    batches: dict[int, list[Row]] = field(default_factory=dict)
    progress: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]

    @property
    def input_rows(self) -> list[int]:
        """``numInputRows`` of every batch that read something."""
        return [p["numInputRows"] for p in self.progress if p["numInputRows"]]


def run_available_now(
    stream: DataFrame,
    checkpoint: Path,
    columns: Sequence[str] = ("topic", "queueId", "queueOffset", "body"),
    timeout_s: float = 120,
) -> StreamRun:
    """Run ``stream`` with ``trigger(availableNow=True)`` to the end; collect every batch."""
    run = StreamRun()

    def collect(batch: DataFrame, batch_id: int) -> None:
        run.batches[batch_id] = batch.select(*columns).collect()

    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    await_query(query, timeout_s)
    run.progress = [dict(p) for p in query.recentProgress]
    return run


Position = tuple[str, int, int]  # (topic, queueId, queueOffset)


def positions(rows: Iterable[Row]) -> list[Position]:
    """Every (topic, queueId, queueOffset) of ``rows``, duplicates kept, sorted."""
    return sorted((r.topic, r.queueId, r.queueOffset) for r in rows)


def queue_positions(
    client: RocketMQClient, topic: str, queues: set[int] | None = None, start: int = 0
) -> list[Position]:
    """What the broker holds in ``queues`` (all by default) from offset ``start`` on, sorted."""
    return sorted(
        (topic, row["queue_id"], offset)
        for row in client.topic_status(topic)
        if queues is None or row["queue_id"] in queues
        for offset in range(max(start, row["min_offset"]), row["max_offset"])
    )


def source_offset(progress: dict[str, Any], key: str = "endOffset") -> dict[str, Any]:
    """The offset ``key`` one batch's progress reports for its (only) source, as a dict
    (Spark gives JSON text or a map)."""
    value = progress["sources"][0][key]
    return json.loads(value) if isinstance(value, str) else dict(value)


def end_offset(run: StreamRun) -> dict[str, Any]:
    """The source's end offset after the run's last batch, as Spark reports it."""
    return source_offset(run.progress[-1])


def await_query(query: StreamingQuery, timeout_s: float) -> None:
    """Wait for an available-now query to end; raise its failure.

    A query still running after ``timeout_s`` is stopped (it would otherwise keep using
    the shared session's two task slots in every later test) and the test fails, naming
    what the query was doing.
    """
    if not query.awaitTermination(timeout_s):  # raises the query's failure, if it failed
        status, last = query.status, query.lastProgress
        query.stop()
        raise AssertionError(
            f"stream did not finish within {timeout_s} s: status {status}, last progress {last}"
        )
