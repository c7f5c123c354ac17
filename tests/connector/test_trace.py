"""The connector's ``trace`` option: Pub records from the sink, SubBefore from the source,
in the broker's trace topic, found by message id with the Spark context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from broker_core.errors import ConfigError
from broker_core.protocol.trace import TRACE_TOPIC, TraceRecord, decode
from connector.sink_options import parse_sink_options
from tests.connector.conftest import new_topic, read_stream, run_available_now
from tests.server.conftest import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(
        tmp_path_factory.mktemp("trace-broker"), config={"broker": {"trace_topic_enable": True}}
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def traces(client: RocketMQClient, msg_id: str) -> list[TraceRecord]:
    found = client.query_message(key=msg_id, topic=TRACE_TOPIC, max_results=100, text_bodies=True)
    return [r for m in found for r in decode(m["body"]) if r.msg_id == msg_id]


def test_sink_pub_and_source_read_records(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "traced", queues=1)
    (
        spark.createDataFrame([(f"row-{i}",) for i in range(5)], "body string")
        .coalesce(1)
        .write.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .option("trace", "true")
        .mode("append")
        .save()
    )
    stored = client.pull("g-trace", topic, 0, 0, 10).messages
    assert len(stored) == 5
    for msg in stored:
        [pub] = [r for r in traces(client, msg.message_id) if r.type == "Pub"]
        assert (pub.group, pub.topic, pub.region) == (
            "spark",
            topic,
            "query=- batch=-1 partition=0",
        )
        assert pub.body_length == len(msg.body) and pub.success
    run = run_available_now(
        read_stream(spark, broker.endpoint, topic=topic, trace="true", startingOffsets="earliest"),
        tmp_path / "cp",
    )
    assert len(run.rows) == 5
    [batch_id] = run.batches
    for msg in stored:
        [read] = [r for r in traces(client, msg.message_id) if r.type == "SubBefore"]
        assert read.group == "spark"
        assert f"batch={batch_id} partition=0 offsets=0-5" in read.request_id
        assert "query=-" not in read.request_id  # a streaming read names its query


def test_trace_option_is_checked() -> None:
    base = {"endpoints": "127.0.0.1:1", "topic": "t"}
    assert parse_sink_options({**base, "trace": "true"}).trace
    assert not parse_sink_options(base).trace
    with pytest.raises(ConfigError, match="trace"):
        parse_sink_options({**base, "trace": "yes"})
    with pytest.raises(ConfigError, match="at-least-once"):
        parse_sink_options({**base, "trace": "true", "exactlyOnce": "true"})
