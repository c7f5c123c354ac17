"""Streaming reads (``spark.readStream.format("rocketmq")``) with ``trigger(availableNow=True)``.

Batch sizes come from the query's ``recentProgress``; restarts reuse the checkpoint
directory; retention runs on a second broker with tiny segments and a tiny
``file_reserved_hours``, so old segments go within a second of being filled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from broker_core.client import RocketMQClient
from broker_core.errors import OffsetOutOfRangeError
from connector import SCHEMA
from connector.arrow import arrow_schema_of
from connector.offsets import QueueRef
from connector.options import parse_read_options
from connector.source import QueueRange, ReadSettings, read_range
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
    start_broker,
)


def test_available_now_reads_everything(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-all", queues=3)
    produce(client, topic, 25, tag="T")
    stream = read_stream(spark, broker.endpoint, topic=topic, startingOffsets="earliest")
    assert stream.schema == SCHEMA and stream.isStreaming
    run = run_available_now(stream, tmp_path / "cp")
    assert positions(run.rows) == queue_positions(client, topic)
    assert sorted(r.body.decode() for r in run.rows) == sorted(f"m-{i}" for i in range(25))
    assert run.input_rows == [25]
    assert end_offset(run) == {
        topic: {
            f"broker-a:{row['queue_id']}": row["max_offset"] for row in client.topic_status(topic)
        }
    }


def test_default_start_is_latest(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-latest", queues=2)
    produce(client, topic, 5, prefix="old")
    stream = read_stream(spark, broker.endpoint, topic=topic)
    assert run_available_now(stream, tmp_path / "cp").rows == []
    produce(client, topic, 3, prefix="new")
    again = run_available_now(stream, tmp_path / "cp")
    assert sorted(r.body.decode() for r in again.rows) == ["new-0", "new-1", "new-2"]


def test_max_messages_per_trigger_splits_by_backlog(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-rate", queues=4)
    produce(client, topic, 20)
    stream = read_stream(
        spark, broker.endpoint, topic=topic, startingOffsets="earliest", maxMessagesPerTrigger="6"
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert run.input_rows == [6, 6, 6, 2]
    assert positions(run.rows) == queue_positions(client, topic)
    first = run.batches[min(run.batches)]
    assert sorted({r.queueId for r in first}) == [0, 1, 2, 3]  # every queue got a share


def test_max_bytes_per_trigger(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-bytes", queues=2)
    produce(client, topic, 12, body_bytes=1000)  # 1000 bytes each, no tag/keys/properties
    stream = read_stream(
        spark, broker.endpoint, topic=topic, startingOffsets="earliest", maxBytesPerTrigger="5000"
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert run.input_rows == [5, 5, 2]
    assert len(run.rows) == 12


def test_min_messages_and_max_trigger_delay(broker: BrokerProcess, client: RocketMQClient) -> None:
    """The admission policy on the reader itself (no Spark: no waiting on triggers)."""
    topic = new_topic(client, "s-min", queues=2)
    options = parse_read_options(
        {
            "endpoints": broker.endpoint,
            "topic": topic,
            "startingOffsets": "earliest",
            "minMessagesPerTrigger": "5",
            "maxTriggerDelay": "1h",
        },
        streaming=True,
    )
    reader = RocketMQStreamReader(options, SCHEMA)
    assert reader.getDefaultReadLimit() == ReadMinRows(5)
    start = reader.initialOffset()
    produce(client, topic, 3)
    assert reader.latestOffset(start, ReadMinRows(5)) == start  # 3 < 5 and no delay passed
    assert reader.latestOffset(start, ReadAllAvailable()) != start  # the engine overrides
    reader._last_trigger_s -= 3600  # maxTriggerDelay has passed since the last batch
    moved = reader.latestOffset(start, ReadMinRows(5))
    assert sum(moved[topic].values()) == 3
    produce(client, topic, 2)
    assert sum(reader.latestOffset(moved, ReadMinRows(5))[topic].values()) == 3  # only 2 new
    assert sum(reader.latestOffset(start, ReadMinRows(5))[topic].values()) == 5
    assert sum(reader.latestOffset(start, ReadMaxRows(4))[topic].values()) == 4
    assert reader.reportLatestOffset() == {topic: {"broker-a:0": 3, "broker-a:1": 2}}
    reader.stop()


def test_min_messages_does_not_block_available_now(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-min-now", queues=2)
    produce(client, topic, 3)
    stream = read_stream(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsets="earliest",
        minMessagesPerTrigger="100",
        maxTriggerDelay="1h",
    )
    assert len(run_available_now(stream, tmp_path / "cp").rows) == 3


def test_restart_continues_exactly(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-restart", queues=3)
    produce(client, topic, 10, prefix="a")
    options = {"topic": topic, "startingOffsets": "earliest", "maxMessagesPerTrigger": "4"}
    first = run_available_now(read_stream(spark, broker.endpoint, **options), tmp_path / "cp")
    produce(client, topic, 7, prefix="b")
    # a changed startingOffsets is ignored on restart: the checkpoint wins
    second = run_available_now(
        read_stream(spark, broker.endpoint, **{**options, "startingOffsets": "latest"}),
        tmp_path / "cp",
    )
    third = run_available_now(read_stream(spark, broker.endpoint, **options), tmp_path / "cp")
    assert first.input_rows == [4, 4, 2] and second.input_rows == [4, 3] and third.rows == []
    seen = positions(first.rows) + positions(second.rows)
    assert len(seen) == len(set(seen)) == 17  # no duplicates
    assert sorted(seen) == queue_positions(client, topic)  # no gaps
    assert sorted(r.body.decode() for r in second.rows) == sorted(f"b-{i}" for i in range(7))


def test_new_queues_are_picked_up_from_their_first_offset(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-grow", queues=2)
    produce(client, topic, 4, prefix="before")
    stream = read_stream(spark, broker.endpoint, topic=topic, startingOffsets="earliest")
    assert len(run_available_now(stream, tmp_path / "cp").rows) == 4
    client.create_topic(topic, queues=4, update=True)
    produce(client, topic, 8, prefix="after")
    run = run_available_now(stream, tmp_path / "cp")
    assert sorted(r.body.decode() for r in run.rows) == sorted(f"after-{i}" for i in range(8))
    assert {(r.queueId, r.queueOffset) for r in run.rows if r.queueId >= 2} == {
        (2, 0),
        (2, 1),
        (3, 0),
        (3, 1),
    }


def test_topic_pattern_picks_up_new_topics(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    first = new_topic(client, "s-pat", queues=1)
    produce(client, first, 2)
    prefix = first.rsplit("-", 2)[0]
    stream = read_stream(
        spark,
        broker.endpoint,
        topicPattern=f"{prefix}-[0-9]+-[0-9a-f]+",
        startingOffsets="earliest",
    )
    assert {r.topic for r in run_available_now(stream, tmp_path / "cp").rows} == {first}
    second = new_topic(client, "s-pat", queues=2)
    produce(client, second, 3)
    run = run_available_now(stream, tmp_path / "cp")
    assert positions(run.rows) == queue_positions(client, second)


def test_commit_offsets_show_in_group_progress(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-commit", queues=2)
    produce(client, topic, 9)
    group = f"GID_{topic}"
    stream = read_stream(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsets="earliest",
        consumerGroup=group,
        commitOffsets="true",
        maxMessagesPerTrigger="4",
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert run.input_rows == [4, 4, 1]
    progress = client.group_progress(group, topic)
    assert {q["queue_id"]: q["consumer_offset"] for q in progress["queues"]} == {0: 5, 1: 4}
    assert progress["total_lag"] == 0
    produce(client, topic, 2)
    assert client.group_progress(group, topic)["total_lag"] == 2  # lag shows in broker tools


def test_tag_expression_in_a_stream(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = new_topic(client, "s-tag", queues=2)
    produce(client, topic, 6, tag="keep", prefix="keep")
    produce(client, topic, 6, tag="drop", prefix="drop")
    stream = read_stream(
        spark,
        broker.endpoint,
        topic=topic,
        startingOffsets="earliest",
        tagExpression="keep",
        maxMessagesPerTrigger="8",
    )
    run = run_available_now(stream, tmp_path / "cp")
    assert sorted(r.body.decode() for r in run.rows) == sorted(f"keep-{i}" for i in range(6))
    assert sum(end_offset(run)[topic].values()) == 12  # filtered messages are passed, not re-read


def test_bad_option_fails_the_stream_naming_it(
    spark: SparkSession, broker: BrokerProcess, tmp_path: Path
) -> None:
    stream = read_stream(spark, broker.endpoint, topic="x", maxMessagesPerTrigger="lots")
    with pytest.raises(PySparkException, match="option 'maxMessagesPerTrigger'"):
        run_available_now(stream, tmp_path / "cp")


# ---- retention and failOnDataLoss -------------------------------------------------------------

Lost = tuple[str, Path, int, int]  # topic, checkpoint dir, queue min, queue max

RETENTION = {
    "store": {
        "segment_size_bytes": 64 << 10,
        "max_body_bytes": 8 << 10,
        "max_properties_bytes": 4 << 10,
        "file_reserved_hours": 0.0001,
        "cleanup_interval_ms": 100,
        "flush_interval_ms": 20,
    }
}


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Segments of 64 KiB deleted 0.36 s after their last write (only the active one stays)."""
    proc = start_broker(tmp_path_factory.mktemp("retention-broker"), config=RETENTION)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def wait_for_retention(
    broker: BrokerProcess, client: RocketMQClient, topic: str, above: int
) -> tuple[int, int]:
    """Wait until retention left only the active segment; the queue's (min, max) then."""
    segments = broker.store_dir / "commitlog"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        (status,) = client.topic_status(topic)
        if len(list(segments.iterdir())) == 1 and status["min_offset"] > above:
            return status["min_offset"], status["max_offset"]
        time.sleep(0.05)
    raise AssertionError(f"retention did not run: {list(segments.iterdir())}")


@pytest.fixture(scope="module")
def lost(
    retention_broker: BrokerProcess, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Lost]:
    """A 1-queue topic whose stream checkpoint is at 10 but whose first offsets are gone:
    (topic, checkpoint dir, queue min, queue max)."""
    with RocketMQClient(retention_broker.endpoint) as client:
        topic = new_topic(client, "lossy", queues=1)
        produce(client, topic, 10, body_bytes=1000)
        checkpoint = tmp_path_factory.mktemp("lossy") / "cp"
        stream = read_stream(
            spark, retention_broker.endpoint, topic=topic, startingOffsets="earliest"
        )
        assert len(run_available_now(stream, checkpoint).rows) == 10
        for _ in range(6):  # ~5 segments of 64 KiB
            produce(client, topic, 60, body_bytes=1000)
        low, high = wait_for_retention(retention_broker, client, topic, above=10)
        yield topic, checkpoint, low, high


def test_data_loss_fails_the_stream_by_default(
    spark: SparkSession, retention_broker: BrokerProcess, lost: Lost
) -> None:
    topic, checkpoint, low, _ = lost
    stream = read_stream(spark, retention_broker.endpoint, topic=topic)
    with pytest.raises(
        PySparkException,
        match=rf"data loss in {topic} broker-a:0: offsets "
        rf"\[10, {low}\) were removed by retention.*"
        rf"failOnDataLoss=false",
    ):
        run_available_now(stream, checkpoint)


def test_data_loss_skipped_when_allowed(
    spark: SparkSession, retention_broker: BrokerProcess, lost: Lost
) -> None:
    topic, checkpoint, low, high = lost
    stream = read_stream(spark, retention_broker.endpoint, topic=topic, failOnDataLoss="false")
    run = run_available_now(stream, checkpoint)
    assert positions(run.rows) == [(topic, 0, offset) for offset in range(low, high)]


def test_batch_data_loss(spark: SparkSession, retention_broker: BrokerProcess, lost: Lost) -> None:
    topic, _, low, high = lost
    start = json.dumps({topic: {"broker-a:0": 0}})
    with pytest.raises(PySparkException, match=r"offsets \[0, \d+\) were removed by retention"):
        read_batch(spark, retention_broker.endpoint, topic=topic, startingOffsets=start).count()
    skipped = read_batch(
        spark, retention_broker.endpoint, topic=topic, startingOffsets=start, failOnDataLoss="false"
    )
    assert skipped.count() == high - low


def test_data_loss_found_by_the_executor(retention_broker: BrokerProcess, lost: Lost) -> None:
    """Retention between planning and reading: ``read`` meets ILLEGAL_OFFSET itself."""
    topic, _, low, high = lost
    part = QueueRange(retention_broker.endpoint, QueueRef(topic, "broker-a", 0), 3, high)
    schema = arrow_schema_of(SCHEMA)
    strict = ReadSettings("GID_loss", fail_on_data_loss=True, include_properties=True)
    with pytest.raises(OffsetOutOfRangeError, match=rf"offsets \[3, {low}\) were removed"):
        list(read_range(part, strict, schema))
    lenient = ReadSettings("GID_loss", fail_on_data_loss=False, include_properties=True)
    batches = list(read_range(part, lenient, schema))
    offsets = [o for b in batches for o in b.column("queueOffset").to_pylist()]
    assert offsets == list(range(low, high))
    assert all(b.schema.equals(schema) for b in batches)
