"""Issue 17, Kafka-connector parity, against a real broker and ``local[2]`` Spark: Kafka's
option names, ``assign``, ``minPartitions`` / ``maxMessagesPerPartition``, per-queue
timestamps, ``startingOffsets=group``, and what a stream reports (``latestOffset``).

Every read is checked offset by offset: the (topic, queue, offset) triples read are
exactly the expected ones, each once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from connector import SCHEMA
from connector.options import parse_read_options
from connector.stream_source import RocketMQStreamReader
from tests.connector.conftest import (
    BrokerProcess,
    end_offset,
    new_topic,
    positions,
    produce,
    queue_positions,
    read_batch,
    read_stream,
    run_available_now,
    source_offset,
)


def time_boundary(client: RocketMQClient, topic: str) -> int:
    """A time after every message stored in ``topic`` so far, and before any later one:
    waits (bounded) until the clock has passed the last store time."""
    last_ms = 0
    for row in client.topic_status(topic):
        for offset in range(row["min_offset"], row["max_offset"]):
            batch = client.pull("GID_oracle", topic, row["queue_id"], offset, 1)
            last_ms = max(last_ms, batch.messages[0].store_timestamp_ms)
    deadline = time.monotonic() + 5
    while time.time() * 1000 <= last_ms + 1:
        assert time.monotonic() < deadline, "the clock did not move past the last store time"
        time.sleep(0.002)
    return int(time.time() * 1000)


# ---- Kafka's option names -------------------------------------------------------------------


def test_kafka_names_in_a_stream(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-alias", queues=2)
    produce(client, topic, 10)
    stream = read_stream(
        spark,
        broker.endpoint,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="4",
        minOffsetsPerTrigger="3",  # waits for 3 messages, but never holds availableNow back
        maxTriggerDelay="1h",
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert run.input_rows == [4, 4, 2]
    assert positions(run.rows) == queue_positions(client, topic)


def test_kafka_names_in_a_batch(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    first, second = new_topic(client, "k-pat", queues=1), new_topic(client, "k-pat", queues=2)
    produce(client, first, 3)
    produce(client, second, 4)
    pattern = f"{first.split('-')[0]}-pat-[0-9]+-({first[-6:]}|{second[-6:]})"
    df = read_batch(spark, broker.endpoint, subscribePattern=pattern)
    assert positions(df.collect()) == sorted(
        queue_positions(client, first) + queue_positions(client, second)
    )


def test_unknown_and_conflicting_options_through_spark(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-bad", queues=1)
    with pytest.raises(PySparkException, match="did you mean 'maxOffsetsPerTrigger'"):
        run_available_now(
            read_stream(spark, broker.endpoint, topic=topic, maxOffsetPerTriger="5"),
            tmp_path / "cp",
        )
    # Spark lower-cases option names before the source sees them
    with pytest.raises(PySparkException, match="option 'maxmessagespertriger'"):
        read_batch(spark, broker.endpoint, topic=topic, maxMessagesPerTriger="5").collect()
    with pytest.raises(PySparkException, match=r"option 'subscribe'.*different values"):
        read_batch(spark, broker.endpoint, topics=topic, subscribe="other").collect()


# ---- assign ---------------------------------------------------------------------------------


def test_assign_in_a_batch(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "k-assign", queues=4)
    produce(client, topic, 12)
    assign = json.dumps({topic: ["broker-a:0", "broker-a:3"]})
    df = read_batch(spark, broker.endpoint, assign=assign)
    assert positions(df.collect()) == queue_positions(client, topic, {0, 3})
    # offsets JSON for an unassigned queue is refused; a queue no broker has too
    start = json.dumps({topic: {"broker-a:1": 0}})
    with pytest.raises(PySparkException, match=r"option 'startingOffsets'.*not a queue"):
        read_batch(spark, broker.endpoint, assign=assign, startingOffsets=start).collect()
    missing = json.dumps({topic: ["broker-a:0", "broker-a:9"]})
    with pytest.raises(PySparkException, match=r"option 'assign'.*broker-a:9 is not served"):
        read_batch(spark, broker.endpoint, assign=missing).collect()


def test_assign_in_a_stream(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-assign-s", queues=3)
    produce(client, topic, 9, prefix="a")
    stream = read_stream(
        spark,
        broker.endpoint,
        assign=json.dumps({topic: ["broker-a:1"]}),
        startingOffsets="earliest",
        maxOffsetsPerTrigger="2",
    )
    first = run_available_now(stream, tmp_path / "cp")
    assert first.input_rows == [2, 1]
    assert positions(first.rows) == queue_positions(client, topic, {1})
    produce(client, topic, 6, prefix="b")
    second = run_available_now(stream, tmp_path / "cp")
    assert positions(second.rows) == queue_positions(client, topic, {1}, start=3)
    assert end_offset(second) == {topic: {"broker-a:1": 5}}  # only the assigned queue


# ---- minPartitions / maxMessagesPerPartition ------------------------------------------------


def test_split_partitions_in_a_batch(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "k-split", queues=2)
    for i in range(8):  # each queue alternates keep / drop tags
        produce(client, topic, 2, tag="keep" if i % 2 == 0 else "drop", prefix=f"r{i}")
    everything = queue_positions(client, topic)
    assert read_batch(spark, broker.endpoint, topic=topic).rdd.getNumPartitions() == 2
    wide = read_batch(spark, broker.endpoint, topic=topic, minPartitions="5")
    assert wide.rdd.getNumPartitions() >= 5
    assert positions(wide.collect()) == everything
    capped = read_batch(spark, broker.endpoint, topic=topic, maxRecordsPerPartition="3")
    assert capped.rdd.getNumPartitions() == 6  # 8 offsets per queue: 3 + 3 + 2
    assert positions(capped.collect()) == everything
    tagged = read_batch(
        spark, broker.endpoint, topic=topic, maxMessagesPerPartition="3", tagExpression="keep"
    )
    kept = tagged.collect()
    assert sorted(r.body.decode() for r in kept) == sorted(
        f"r{i}-{j}" for i in range(0, 8, 2) for j in range(2)
    )
    assert len({(r.queueId, r.queueOffset) for r in kept}) == len(kept) == 8


def test_split_partitions_in_a_stream(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-split-s", queues=2)
    produce(client, topic, 20)
    options = {"topic": topic, "startingOffsets": "earliest", "minPartitions": "4"}
    reader = RocketMQStreamReader(
        parse_read_options({"endpoints": broker.endpoint, **options}, streaming=True), SCHEMA
    )
    start = reader.initialOffset()
    pieces = reader.partitions(start, reader.latestOffset(start, reader.getDefaultReadLimit()))
    reader.stop()
    assert len(pieces) == 4
    assert sorted((p.ref.queue_id, o) for p in pieces for o in range(p.start, p.end)) == [
        (q, o) for q in (0, 1) for o in range(10)
    ]
    run = run_available_now(read_stream(spark, broker.endpoint, **options), tmp_path / "cp")
    assert positions(run.rows) == queue_positions(client, topic)


# ---- per-queue timestamps -------------------------------------------------------------------


def test_timestamps_per_queue_in_a_batch(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "k-times", queues=2)
    produce(client, topic, 6, prefix="early")  # 3 per queue
    boundary_ms = time_boundary(client, topic)
    produce(client, topic, 4, prefix="late")  # 2 per queue
    start = json.dumps({topic: {"broker-a:0": boundary_ms}})
    late_0 = read_batch(spark, broker.endpoint, topic=topic, startingOffsetsByTimestamp=start)
    # queue 0 from the boundary, queue 1 (not named) from the earliest
    assert positions(late_0.collect()) == [
        *queue_positions(client, topic, {0}, start=3),
        *queue_positions(client, topic, {1}),
    ]
    end = json.dumps({topic: {"broker-a:1": boundary_ms}})
    early_1 = read_batch(spark, broker.endpoint, topic=topic, endingOffsetsByTimestamp=end)
    assert positions(early_1.collect()) == [
        *queue_positions(client, topic, {0}),
        (topic, 1, 0),
        (topic, 1, 1),
        (topic, 1, 2),
    ]
    future = json.dumps({topic: {"broker-a:0": boundary_ms + 3_600_000}})
    with pytest.raises(PySparkException, match="startingOffsetsByTimestampStrategy=latest"):
        read_batch(spark, broker.endpoint, topic=topic, startingOffsetsByTimestamp=future).count()
    lenient = read_batch(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsetsByTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert positions(lenient.collect()) == queue_positions(client, topic, {1})


def test_timestamps_per_queue_in_a_stream(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-times-s", queues=2)
    produce(client, topic, 4, prefix="early")
    boundary_ms = time_boundary(client, topic)
    produce(client, topic, 4, prefix="late")
    stream = read_stream(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"broker-a:0": boundary_ms}}),
    )
    first = run_available_now(stream, tmp_path / "cp")
    # queue 0 from the boundary; queue 1 (not named) from the latest, as a stream starts
    assert positions(first.rows) == [(topic, 0, 2), (topic, 0, 3)]
    produce(client, topic, 2, prefix="new")
    second = run_available_now(stream, tmp_path / "cp")
    assert positions(second.rows) == [(topic, 0, 4), (topic, 1, 4)]


# ---- startingOffsets=group ------------------------------------------------------------------


def test_group_start_in_a_batch(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "k-group", queues=2)
    produce(client, topic, 10)  # 5 per queue
    group = f"GID_{topic}"
    client.create_group(group)
    client.update_offset(group, topic, 0, 3)  # queue 1: never committed
    options = {"topic": topic, "startingOffsets": "group", "consumerGroup": group}
    df = read_batch(spark, broker.endpoint, **options)
    assert positions(df.collect()) == [
        (topic, 0, 3),
        (topic, 0, 4),
        *queue_positions(client, topic, {1}),
    ]
    latest = read_batch(spark, broker.endpoint, **options, groupFallback="latest")
    assert positions(latest.collect()) == [(topic, 0, 3), (topic, 0, 4)]
    with pytest.raises(PySparkException, match=r"no committed offset in .*broker-a:1"):
        read_batch(spark, broker.endpoint, **options, groupFallback="error").count()


def test_group_start_in_a_stream_follows_offset_reset(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-group-s", queues=2)
    produce(client, topic, 6, prefix="old")
    group = f"GID_{topic}"
    client.create_group(group)
    assert client.reset_offset(group, topic, "latest") == {0: 3, 1: 3}  # rmq offset reset
    produce(client, topic, 4, prefix="new")
    stream = read_stream(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsets="group",
        consumerGroup=group,
        commitOffsets="true",
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert sorted(r.body.decode() for r in run.rows) == [f"new-{i}" for i in range(4)]
    assert client.group_progress(group, topic)["total_lag"] == 0  # and it commits on


# ---- what a stream reports ------------------------------------------------------------------


def test_progress_reports_latest_offset_per_queue(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "k-metrics", queues=2)
    produce(client, topic, 10)
    stream = read_stream(
        spark, broker.endpoint, topic=topic, startingOffsets="earliest", maxOffsetsPerTrigger="4"
    )
    run = run_available_now(stream, tmp_path / "cp")
    latest = source_offset(run.progress[0], "latestOffset")
    ends = source_offset(run.progress[0])
    assert latest == {topic: {"broker-a:0": 5, "broker-a:1": 5}}  # the queues' ends
    assert sum(ends[topic].values()) == 4  # what the batch read
