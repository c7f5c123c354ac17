"""``format("rocketmq")`` against a real Apache RocketMQ 5 (``peers.rocketmq``: a NameServer
and a broker inside the gRPC proxy, ``-pm local``), through the client's standard-protocol
fallback (``broker_core/client/standard.py``).

What RocketMQ 5.5.0's proxy serves decides what works there:

* the at-least-once sink: SendMessage is served, so the rows written arrive; the 5.x Java
  client's SimpleConsumer reads them back. The ``exactlyOnce`` batch write is refused
  (RocketMQ takes no transactional batch of several messages): its tasks fail;
* the source: the proxy answers UNIMPLEMENTED for QueryOffset, PullMessage, GetOffset and
  UpdateOffset (it serves the 5.x clients' ReceiveMessage/Ack only), so batch reads and
  streams cannot read; they fail when the query starts, naming those calls;
* ``topicPattern`` (ListTopics) and the exactly-once streaming sink (our admin service)
  fail at start as against our broker with ``--no-extensions``.

RocketMQ is started once for the module (30-60 s of JVM start).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from tests.conformance.targets import Target, start_peer
from tests.connector.conftest import read_batch, read_stream, run_available_now

SINK_SCHEMA = StructType(
    [StructField("body", BinaryType(), False), StructField("tag", StringType(), True)]
)
READ_CALLS = ("QueryOffset", "PullMessage")
pytestmark = pytest.mark.slow  # a RocketMQ JVM start, Spark jobs and Java clients: minutes


@pytest.fixture(scope="module")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    target = start_peer(tmp_path_factory.mktemp("rocketmq"))
    try:
        target.topic("conn-orders", 2)
        yield target
    finally:
        target.stop()


def _failure(action: object) -> str:
    with pytest.raises((Py4JJavaError, PySparkException)) as caught:
        action()  # type: ignore[operator]
    return str(caught.value)


def _rows(count: int, prefix: str) -> list[tuple[bytes, str | None]]:
    return [(f"{prefix}-{i}".encode(), ("paid", "shipped")[i % 2]) for i in range(count)]


def _write(spark: SparkSession, target: Target, topic: str, rows: list, **options: str) -> None:
    df: DataFrame = spark.createDataFrame(rows, SINK_SCHEMA).repartition(2)
    (
        df.write.format("rocketmq")
        .option("endpoints", target.grpc)
        .option("topic", topic)
        .option("batchSize", "16")
        .options(**options)
        .mode("append")
        .save()
    )


def _received(target: Target, topic: str, group: str, count: int, tags: str = "*") -> list:
    """What the 5.x Java client's SimpleConsumer of a new group receives (body, tag)."""
    target.group(group)
    run = target.c5("simple", topic, group, str(count), "60", tags)
    assert run.error is None, run.error
    return sorted((str(e["body"]), str(e["tag"])) for e in run.of("received"))


def test_at_least_once_sink_rows_arrive_in_rocketmq(spark: SparkSession, rocketmq: Target) -> None:
    rocketmq.topic("conn-sunk", 2)
    rows = _rows(100, "row")
    _write(spark, rocketmq, "conn-sunk", rows)
    expected = sorted((body.decode(), tag or "") for body, tag in rows)
    assert _received(rocketmq, "conn-sunk", "GID_conn_sunk", 100) == expected


def test_exactly_once_batch_write_is_refused_by_rocketmq(
    spark: SparkSession, rocketmq: Target
) -> None:
    """Not supported there (a known gap): the sink prepares each batch as one transactional
    SendMessage of several messages, which RocketMQ refuses even on a TRANSACTION topic
    (a NORMAL topic refuses any transactional send). The write's tasks fail; nothing
    committed arrives."""
    rocketmq.topic("conn-sunk-eo", 2, "-a", "+message.type=TRANSACTION")
    text = _failure(
        lambda: _write(spark, rocketmq, "conn-sunk-eo", _rows(40, "eo"), exactlyOnce="true")
    )
    assert "the message is illegal" in text, text


def test_batch_read_with_offsets_and_tag_filter_fails_at_start(
    spark: SparkSession, rocketmq: Target
) -> None:
    _write(spark, rocketmq, "conn-orders", _rows(20, "order"))
    offsets = {"conn-orders": {"peer-broker-a:0": 2, "peer-broker-a:1": 3}}
    df = read_batch(
        spark,
        rocketmq.grpc,
        topic="conn-orders",
        startingOffsets=json.dumps(offsets),
        endingOffsets="latest",
    ).where("tag = 'paid'")
    text = _failure(df.count)
    assert all(call in text for call in READ_CALLS), text
    assert "does not implement" in text and rocketmq.grpc in text, text


def test_available_now_stream_fails_at_start(
    spark: SparkSession, rocketmq: Target, tmp_path: Path
) -> None:
    stream = read_stream(spark, rocketmq.grpc, topic="conn-orders", startingOffsets="earliest")
    text = _failure(lambda: run_available_now(stream, tmp_path / "cp"))
    assert all(call in text for call in READ_CALLS), text
    assert not list((tmp_path / "cp").glob("offsets/*")), "no batch may be planned"


def test_topic_pattern_fails_naming_list_topics(spark: SparkSession, rocketmq: Target) -> None:
    text = _failure(lambda: read_batch(spark, rocketmq.grpc, topicPattern="conn-.*").count())
    assert "ListTopics" in text and "instead of a pattern" in text, text


def test_exactly_once_stream_sink_fails_naming_the_admin_service(
    spark: SparkSession, rocketmq: Target, tmp_path: Path
) -> None:
    source = spark.readStream.format("rate").option("rowsPerSecond", "5").load()
    query = (
        source.selectExpr("CAST(CAST(value AS STRING) AS BINARY) AS body")
        .writeStream.format("rocketmq")
        .option("endpoints", rocketmq.grpc)
        .option("topic", "conn-eo-stream")
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(tmp_path / "eo"))
        .start()
    )
    try:
        text = _failure(lambda: query.awaitTermination(120))
    finally:
        query.stop()
    assert "exactly-once streaming sink" in text and "rmq.admin.v1.Admin" in text, text
