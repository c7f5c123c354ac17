"""``format("rocketmq")`` against a standard RocketMQ 5 endpoint: our broker with
``grpc_extensions = false`` serves ``apache.rocketmq.v2`` only, and the source and sink
must give the same rows as through our admin and bulk services.

Two brokers serve copies of one store: ``full`` (our services on) and ``plain`` (off). So
reads compare every column, message ids and timestamps included. Writes send the same
DataFrame through each and compare what lands (ids and times are new per send).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.errors import ServiceNotOfferedError
from broker_core.server.launcher import launch_broker
from connector.arrow import SCHEMA
from tests.connector.conftest import BrokerProcess, read_batch, read_stream, run_available_now
from tests.server.conftest import DEFAULT_CONFIG

TOPIC = "fallback-orders"
OFF: dict[str, dict[str, object]] = {
    **DEFAULT_CONFIG,
    "broker": {**DEFAULT_CONFIG["broker"], "grpc_extensions": False},
}
COLUMNS = [f.name for f in SCHEMA.fields]
SINK_SCHEMA = StructType(
    [
        StructField("body", BinaryType(), False),
        StructField("tag", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), True),
        StructField("properties", MapType(StringType(), StringType(), False), True),
        StructField("messageGroup", StringType(), True),
    ]
)


def _messages(count: int) -> list[OutgoingMessage]:
    return [
        OutgoingMessage(
            f"order-{i}".encode(),
            tag=("paid", "shipped", None)[i % 3],
            keys=(f"k{i}",) if i % 2 else (),
            properties={"region": ("eu", "us")[i % 2], "n": str(i)} if i % 4 else None,
            message_group=f"g{i % 3}" if i % 5 == 0 else None,
        )
        for i in range(count)
    ]


@dataclass
class Pair:
    full: BrokerProcess
    plain: BrokerProcess


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    base = tmp_path_factory.mktemp("fallback")
    first = launch_broker(base / "full", config=DEFAULT_CONFIG)
    try:
        with RocketMQClient(first.endpoint) as client:
            client.create_topic(TOPIC, queues=3)
            for start in range(0, 300, 100):  # a few requests: queues fill unevenly
                client.send_batch(TOPIC, _messages(300)[start : start + 100])
    finally:
        assert first.stop() == 0, "".join(first.output[-30:])
    shutil.copytree(base / "full" / "store", base / "plain" / "store")
    full = launch_broker(base / "full", config=DEFAULT_CONFIG)
    plain = launch_broker(base / "plain", config=OFF)
    yield Pair(full, plain)
    for proc in (full, plain):
        assert proc.stop() == 0, "".join(proc.output[-30:])


def _sorted(df: DataFrame) -> DataFrame:
    return df.select(*COLUMNS).orderBy("topic", "queueId", "queueOffset")


def _collected(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df`` read once (each comparison then costs no second read)."""
    return spark.createDataFrame(_sorted(df).collect(), SCHEMA)


def test_batch_read_gives_the_same_rows(spark: SparkSession, pair: Pair) -> None:
    plain = _collected(spark, read_batch(spark, pair.plain.endpoint, topic=TOPIC))
    assert plain.count() == 300
    assert_df_equality(_sorted(read_batch(spark, pair.full.endpoint, topic=TOPIC)), plain)
    client = RocketMQClient(pair.plain.endpoint)  # so the rows came by v2 RPCs only:
    with client, pytest.raises(ServiceNotOfferedError):
        client.pull_raw("GID_probe", TOPIC, 0, 0, 1)


def test_batch_read_with_offsets_and_tag_filter(spark: SparkSession, pair: Pair) -> None:
    options = {
        "topic": TOPIC,
        "startingOffsets": json.dumps({TOPIC: {"broker-a:0": 5, "broker-a:2": 40}}),
        "endingOffsets": "latest",
    }
    full = read_batch(spark, pair.full.endpoint, **options).where("tag = 'paid'")
    plain = _collected(
        spark, read_batch(spark, pair.plain.endpoint, **options).where("tag = 'paid'")
    )
    assert 0 < plain.count() < 100  # "paid" is every third message; some offsets skipped
    assert_df_equality(_sorted(full), plain)


def test_available_now_stream_gives_the_same_rows(
    spark: SparkSession, pair: Pair, tmp_path: Path
) -> None:
    runs = {}
    for name, proc in (("full", pair.full), ("plain", pair.plain)):
        stream = read_stream(
            spark,
            proc.endpoint,
            topic=TOPIC,
            startingOffsets="earliest",
            maxMessagesPerTrigger="120",
            commitOffsets="true",
            consumerGroup="GID_fallback",
        )
        runs[name] = run_available_now(stream, tmp_path / name, columns=COLUMNS)
    full, plain = runs["full"], runs["plain"]
    assert full.input_rows == plain.input_rows and sum(plain.input_rows) == 300
    assert_df_equality(
        spark.createDataFrame(full.rows, SCHEMA), spark.createDataFrame(plain.rows, SCHEMA)
    )
    with RocketMQClient(pair.plain.endpoint) as client:  # committed with UpdateOffset
        status = client.topic_status(TOPIC)
        committed = [client.get_offset("GID_fallback", TOPIC, r["queue_id"]) for r in status]
        assert committed == [r["max_offset"] for r in status]


def _sink_rows(spark: SparkSession) -> DataFrame:
    rows = [
        (
            f"row-{i}".encode(),
            ("a", None)[i % 2],
            [f"key-{i}"] if i % 3 else None,
            {"i": str(i)} if i % 4 else None,
            f"grp-{i % 2}" if i % 7 == 0 else None,
        )
        for i in range(200)
    ]
    return spark.createDataFrame(rows, SINK_SCHEMA).repartition(2)


def _landed(spark: SparkSession, endpoint: str, topic: str) -> DataFrame:
    rows = (
        read_batch(spark, endpoint, topic=topic)
        .select("body", "tag", "keys", "properties", "messageGroup")
        .orderBy("body")  # unique; maps cannot be sorted on
        .collect()
    )
    return spark.createDataFrame(rows, SINK_SCHEMA)


@pytest.mark.parametrize("exactly_once", ["false", "true"])
def test_sink_writes_the_same_rows(spark: SparkSession, pair: Pair, exactly_once: str) -> None:
    topic = f"fallback-sunk-{exactly_once}"
    for proc in (pair.full, pair.plain):
        (
            _sink_rows(spark)
            .write.format("rocketmq")
            .option("endpoints", proc.endpoint)
            .option("topic", topic)
            .option("exactlyOnce", exactly_once)
            .option("batchSize", "64")
            .mode("append")
            .save()
        )
    full, plain = (
        _landed(spark, pair.full.endpoint, topic),
        _landed(spark, pair.plain.endpoint, topic),
    )
    assert plain.count() == 200
    assert_df_equality(full, plain)


def _failure(action: object) -> str:
    with pytest.raises((Py4JJavaError, PySparkException)) as caught:
        action()  # type: ignore[operator]
    return str(caught.value)


def test_topic_pattern_says_it_needs_the_admin_service(spark: SparkSession, pair: Pair) -> None:
    text = _failure(
        lambda: read_batch(spark, pair.plain.endpoint, topicPattern="fallback-.*").count()
    )
    assert "ListTopics" in text and "instead of a pattern" in text


def test_exactly_once_stream_says_what_it_needs(
    spark: SparkSession, pair: Pair, tmp_path: Path
) -> None:
    source = read_stream(spark, pair.plain.endpoint, topic=TOPIC, startingOffsets="earliest")
    query = (
        source.selectExpr("body")
        .writeStream.format("rocketmq")
        .option("endpoints", pair.plain.endpoint)
        .option("topic", "fallback-eo-stream")
        .option("exactlyOnce", "true")
        .option("checkpointLocation", str(tmp_path / "eo"))
        .trigger(availableNow=True)
        .start()
    )
    text = _failure(lambda: query.awaitTermination(120))
    assert "exactly-once streaming sink" in text and "rmq.admin.v1.Admin" in text
