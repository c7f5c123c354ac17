"""Batch save modes of the rocketmq sink, as a user meets them: Spark's default mode
(ErrorIfExists) is refused by Spark itself before the sink runs, and its message names
Append; ``mode("overwrite")`` is refused by the sink with a hint at ``mode("append")``;
``mode("append")`` sends every row. Nothing reaches the topic from a refused write."""

from __future__ import annotations

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from tests.connector.conftest import BrokerProcess, new_topic


def stored(client: RocketMQClient, topic: str) -> list[bytes]:
    out: list[bytes] = []
    for q in client.query_route(topic):
        out += [m.body for m in client.pull("inspector", topic, q.queue_id, 0, 100).messages]
    return sorted(out)


def test_default_mode_is_refused_by_spark_and_names_append(
    spark: SparkSession, client: RocketMQClient, broker: BrokerProcess
) -> None:
    topic = new_topic(client, "modes")
    df = spark.createDataFrame([("a",)], "body string")
    writer = df.write.format("rocketmq").option("endpoints", broker.endpoint).option("topic", topic)
    with pytest.raises(PySparkException) as info:
        writer.save()
    text = str(info.value)
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in text, text
    assert "ErrorIfExists" in text and "Append" in text, text
    assert stored(client, topic) == []


def test_overwrite_is_refused_with_an_append_hint(
    spark: SparkSession, client: RocketMQClient, broker: BrokerProcess
) -> None:
    topic = new_topic(client, "modes")
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(PySparkException, match=r"use mode\('append'\)"):
        (
            df.write.format("rocketmq")
            .option("endpoints", broker.endpoint)
            .option("topic", topic)
            .mode("overwrite")
            .save()
        )
    assert stored(client, topic) == []


def test_append_sends_every_row(
    spark: SparkSession, client: RocketMQClient, broker: BrokerProcess
) -> None:
    topic = new_topic(client, "modes")
    df = spark.createDataFrame([("a",), ("b",)], "body string")
    (
        df.write.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    assert stored(client, topic) == [b"a", b"b"]
