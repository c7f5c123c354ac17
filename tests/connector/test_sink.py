"""The sink: batch and streaming (at-least-once) writes, read back from a real broker.

Exactly-once is in ``test_exactly_once.py``. Errors are checked twice: every bad option and
column directly against the parser (pure, fast), and one of each kind through Spark, to
show the message naming the option or column reaches the user.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from broker_core.client import ReceivedMessage, RocketMQClient
from broker_core.errors import ConfigError, InvalidArgumentError
from connector.sink import rows_to_messages
from connector.sink_options import SinkOptions, parse_sink_options, plan_columns
from tests.connector.conftest import await_query
from tests.server.conftest import BrokerProcess, start_broker

ENDPOINT_ONLY = {"endpoints": "127.0.0.1:1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(
        tmp_path_factory.mktemp("sink-broker"), config={"broker": {"timer_precision_ms": 100}}
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint) as c:
        yield c


def read_topic(client: RocketMQClient, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic``, queue by queue, in offset order."""
    out: list[ReceivedMessage] = []
    for queue in client.topic_status(topic):
        offset, end = queue["min_offset"], queue["max_offset"]
        while offset < end:
            batch = client.pull(
                "sink-tests", topic, queue["queue_id"], offset, min(1024, end - offset)
            )
            out.extend(batch.messages)
            offset = batch.next_offset
    return out


def write(df: DataFrame, endpoint: str, **options: str) -> None:
    df.write.format("rocketmq").option("endpoints", endpoint).options(**options).mode(
        "append"
    ).save()


# --------------------------------------------------------------------------- options (pure)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "endpoints"),
        ({"endpoints": "nonsense"}, "endpoints"),
        ({**ENDPOINT_ONLY, "batchSize": "ten"}, "batchSize"),
        ({**ENDPOINT_ONLY, "batchSize": "0"}, "batchSize"),
        ({**ENDPOINT_ONLY, "batchsize": "100001"}, "batchSize"),
        ({**ENDPOINT_ONLY, "ignoreExtraColumns": "yes"}, "ignoreExtraColumns"),
        ({**ENDPOINT_ONLY, "exactlyOnce": "1"}, "exactlyOnce"),
        ({**ENDPOINT_ONLY, "topic": "bad topic"}, "topic"),
        ({**ENDPOINT_ONLY, "exactlyOnce": "true", "producerGroup": "bad group"}, "producerGroup"),
        ({**ENDPOINT_ONLY, "producerGroup": "g"}, "producerGroup"),
        (
            {**ENDPOINT_ONLY, "exactlyOnce": "true", "transactionTimeoutMs": "999"},
            "transactionTimeoutMs",
        ),
        ({**ENDPOINT_ONLY, "transactionTimeoutMs": "5000"}, "transactionTimeoutMs"),
        ({**ENDPOINT_ONLY, "requestTimeoutMs": "-1"}, "requestTimeoutMs"),
        ({**ENDPOINT_ONLY, "startingOffsets": "earliest"}, "startingOffsets"),
        ({"endpoints": "127.0.0.1:1,127.0.0.1:2", "exactlyOnce": "true"}, "endpoints"),
        ({"endpoints": "127.0.0.1:1,"}, "endpoints"),
    ],
)
def test_bad_options_are_errors_naming_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=f"'{named}'"):
        parse_sink_options(options)


def test_unknown_sink_option_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"unknown option 'batchsise'.*did you mean 'batchSize'"):
        parse_sink_options({**ENDPOINT_ONLY, "batchsise": "10"})


def test_options_are_case_insensitive_and_spark_options_are_ignored() -> None:
    opts = parse_sink_options(
        {
            "ENDPOINTS": "127.0.0.1:9876",
            "batchsize": "7",
            "exactlyonce": "TRUE",
            "producergroup": "orders-sink",
            "checkpointLocation": "/tmp/x",
            "path": "p",
        }
    )
    assert opts == SinkOptions(
        ("127.0.0.1:9876",), batch_size=7, exactly_once=True, producer_group="orders-sink"
    )


# --------------------------------------------------------------------------- columns (pure)


def schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


BODY = ("body", BinaryType())
TOPIC = ("topic", StringType())
PLAIN = parse_sink_options(ENDPOINT_ONLY)
WITH_TOPIC = parse_sink_options({**ENDPOINT_ONLY, "topic": "t"})
EXACTLY_ONCE = parse_sink_options({**ENDPOINT_ONLY, "topic": "t", "exactlyOnce": "true"})


@pytest.mark.parametrize(
    ("fields", "opts", "named"),
    [
        ((TOPIC,), PLAIN, "body"),
        ((("body", IntegerType()), TOPIC), PLAIN, "body"),
        ((BODY,), PLAIN, "topic"),
        ((BODY, ("topic", BinaryType())), PLAIN, "topic"),
        ((BODY, TOPIC, ("tag", IntegerType())), PLAIN, "tag"),
        ((BODY, TOPIC, ("keys", ArrayType(IntegerType()))), PLAIN, "keys"),
        ((BODY, TOPIC, ("properties", MapType(StringType(), IntegerType()))), PLAIN, "properties"),
        ((BODY, TOPIC, ("messageGroup", LongType())), PLAIN, "messageGroup"),
        ((BODY, TOPIC, ("deliveryTimestamp", StringType())), PLAIN, "deliveryTimestamp"),
        ((BODY, TOPIC, ("value", StringType())), PLAIN, "value"),
        ((BODY, ("Body", StringType()), TOPIC), PLAIN, "body"),
        ((BODY, ("deliveryTimestamp", LongType())), EXACTLY_ONCE, "deliveryTimestamp"),
    ],
)
def test_bad_columns_are_errors_naming_the_column(
    fields: tuple[tuple[str, Any], ...], opts: SinkOptions, named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"'{named}'"):
        plan_columns(schema(*fields), opts)


def test_extra_columns_may_be_ignored_and_names_are_case_insensitive() -> None:
    opts = parse_sink_options({**ENDPOINT_ONLY, "topic": "t", "ignoreExtraColumns": "true"})
    plan = plan_columns(
        schema(("BODY", StringType()), ("queueOffset", LongType()), ("Keys", StringType())), opts
    )
    assert (plan.body, plan.keys, plan.topic, plan.body_is_text, plan.keys_is_list) == (
        "BODY",
        "Keys",
        None,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ({"body": [None], "topic": ["t"]}, "'body' is null"),
        ({"body": [b""], "topic": ["t"]}, "'body' is empty"),
        ({"body": [b"x"], "topic": [None]}, "'topic' is null"),
    ],
)
def test_bad_rows_are_errors_naming_the_column(rows: dict[str, list[Any]], match: str) -> None:
    batch = pa.RecordBatch.from_pydict(
        rows, schema=pa.schema([("body", pa.binary()), ("topic", pa.string())])
    )
    plan = plan_columns(schema(BODY, TOPIC), PLAIN)
    with pytest.raises(InvalidArgumentError, match=match):
        list(rows_to_messages(batch, plan, None))


def test_rows_become_messages() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "body": ["héllo"],
            "keys": [["k1", "k2"]],
            "properties": [[("a", "1")]],
            "deliveryTimestamp": pa.array(
                [dt.datetime(2030, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")
            ),
        }
    )
    plan = plan_columns(
        schema(
            ("body", StringType()),
            ("keys", ArrayType(StringType())),
            ("properties", MapType(StringType(), StringType())),
            ("deliveryTimestamp", TimestampType()),
        ),
        WITH_TOPIC,
    )
    [(topic, msg)] = list(rows_to_messages(batch, plan, "t"))
    assert topic == "t"
    assert msg.body == "héllo".encode()
    assert (msg.keys, msg.properties) == (("k1", "k2"), {"a": "1"})
    assert msg.delivery_timestamp_ms == int(
        dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp() * 1000
    )


# --------------------------------------------------------------------------- batch writes


READ_BACK = StructType(
    [
        StructField("body", StringType()),
        StructField("tag", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("properties", MapType(StringType(), StringType())),
    ]
)


def read_back(spark: SparkSession, client: RocketMQClient, topic: str) -> DataFrame:
    rows = [
        (m.body.decode(), m.tag, list(m.keys), dict(m.properties) or None)
        for m in read_topic(client, topic)
    ]
    return spark.createDataFrame(rows, READ_BACK)


def test_batch_write_string_bodies_with_tag_keys_and_properties(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    client.create_topic("sink-basic", queues=3)
    expected = spark.createDataFrame(
        [
            (
                f"order-{i}",
                "paid" if i % 2 else None,
                [f"o{i}", f"c{i % 3}"],
                {"region": "eu", "n": str(i)} if i % 3 else None,
            )
            for i in range(50)
        ],
        READ_BACK,
    )
    write(expected.withColumn("topic", F.lit("sink-basic")), broker.endpoint, batchSize="7")
    # maps cannot be sorted by Spark: order both sides by body instead of ignore_row_order
    assert_df_equality(
        read_back(spark, client, "sink-basic").orderBy("body"),
        expected.orderBy("body"),
        ignore_nullable=True,
    )


def test_binary_bodies_and_string_keys_with_the_topic_option(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    client.create_topic("sink-binary", queues=2)
    rows = [(bytes([i, 0, 255 - i]), f"key-{i}") for i in range(20)]
    df = spark.createDataFrame(rows, "body binary, keys string")
    write(df, broker.endpoint, topic="sink-binary")
    got = sorted((m.body, m.keys) for m in read_topic(client, "sink-binary"))
    assert got == sorted((body, (key,)) for body, key in rows)


def test_topic_column_routes_rows_to_several_topics(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    for name in ("sink-route-a", "sink-route-b"):
        client.create_topic(name, queues=2)
    rows = [(f"r{i}", ["sink-route-a", "sink-route-b"][i % 2]) for i in range(30)]
    df = spark.createDataFrame(rows, "body string, topic string").repartition(2)
    write(df, broker.endpoint, batchSize="4")
    for topic, wanted in (("sink-route-a", 0), ("sink-route-b", 1)):
        got = sorted(m.body.decode() for m in read_topic(client, topic))
        assert got == sorted(f"r{i}" for i in range(30) if i % 2 == wanted)


def test_the_topic_option_wins_over_the_topic_column(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    """Issue 13 item 11: rows read from ``orders`` written with topic=copies go to copies."""
    client.create_topic("sink-orders", queues=2)
    client.create_topic("sink-copies", queues=2)
    client.send_batch("sink-orders", [f"o{i}".encode() for i in range(12)])
    source = (
        spark.read.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", "sink-orders")
        .load()
        .select("body", "topic")
    )
    write(source, broker.endpoint, topic="sink-copies")
    assert sorted(m.body for m in read_topic(client, "sink-copies")) == sorted(
        f"o{i}".encode() for i in range(12)
    )
    assert len(read_topic(client, "sink-orders")) == 12


def test_message_group_goes_to_one_queue_in_order(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    client.create_topic("sink-fifo", queues=4)
    rows = [(f"{group}-{seq:03d}", group) for seq in range(40) for group in ("ga", "gb", "gc")]
    df = spark.createDataFrame(rows, "body string, messageGroup string").coalesce(1)
    write(df, broker.endpoint, topic="sink-fifo", batchSize="16")
    by_group: dict[str, list[tuple[int, int, str]]] = {}
    for m in read_topic(client, "sink-fifo"):
        assert m.message_group is not None
        by_group.setdefault(m.message_group, []).append(
            (m.queue_id, m.queue_offset, m.body.decode())
        )
    assert sorted(by_group) == ["ga", "gb", "gc"]
    for group, stored in by_group.items():
        assert len({queue for queue, _, _ in stored}) == 1, f"group {group} spans queues"
        in_offset_order = [body for _, _, body in sorted(stored)]
        assert in_offset_order == [f"{group}-{seq:03d}" for seq in range(40)]


@pytest.mark.parametrize("kind", ["timestamp", "long"])
def test_delivery_timestamp_is_honoured(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, kind: str
) -> None:
    topic = f"sink-timed-{kind}"
    client.create_topic(topic, queues=1)
    due_ms = int(time.time() * 1000) + 1_500
    when = F.timestamp_millis(F.lit(due_ms)) if kind == "timestamp" else F.lit(due_ms)
    df = spark.createDataFrame([("later",)], "body string").withColumn("deliveryTimestamp", when)
    write(df, broker.endpoint, topic=topic)
    if int(time.time() * 1000) < due_ms - 200:  # still early: nothing visible yet
        assert read_topic(client, topic) == []
    batch = client.pull("sink-tests", topic, 0, 0, 1, long_polling_timeout_ms=10_000)
    [msg] = batch.messages
    assert msg.body == b"later"
    assert msg.store_timestamp_ms >= due_ms - 100  # stored when due, not when sent


# --------------------------------------------------------------------------- errors via Spark


@pytest.mark.parametrize(
    ("options", "columns", "named"),
    [
        ({"batchSize": "many"}, "'x' AS body, 't' AS topic", "batchSize"),
        ({"colour": "red"}, "'x' AS body, 't' AS topic", "colour"),
        ({}, "'x' AS body", "topic"),
        ({}, "'x' AS body, 't' AS topic, 1 AS extra", "extra"),
    ],
)
def test_errors_reach_the_user_through_spark(
    spark: SparkSession, broker: BrokerProcess, options: dict[str, str], columns: str, named: str
) -> None:
    df = spark.range(1).selectExpr(*columns.split(", "))
    with pytest.raises(Exception, match=f"'{named}'"):
        write(df, broker.endpoint, **options)


def test_overwrite_mode_is_refused(spark: SparkSession, broker: BrokerProcess) -> None:
    df = spark.range(1).selectExpr("'x' AS body", "'t' AS topic")
    with pytest.raises(Exception, match="overwrite"):
        df.write.format("rocketmq").option("endpoints", broker.endpoint).mode("overwrite").save()


def test_a_null_body_fails_the_write_naming_the_column(
    spark: SparkSession, broker: BrokerProcess
) -> None:
    df = spark.createDataFrame([("a",), (None,)], "body string")
    with pytest.raises(Exception, match="'body' is null"):
        write(df, broker.endpoint, topic="sink-null-body")


# --------------------------------------------------------------------------- streaming


def write_inputs(directory: Path, files: list[list[dict[str, Any]]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for number, rows in enumerate(files):
        lines = "".join(json.dumps(row) + "\n" for row in rows)
        (directory / f"part-{number:03d}.json").write_text(lines)


def test_streaming_write_at_least_once(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    client.create_topic("sink-stream", queues=2)
    files = [[{"body": f"f{f}-r{r}", "tag": f"file{f}"} for r in range(10 + f)] for f in range(3)]
    write_inputs(tmp_path / "in", files)
    source = (
        spark.readStream.schema("body string, tag string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
    )
    query = (
        source.writeStream.format("rocketmq")
        .option("endpoints", broker.endpoint)
        .option("topic", "sink-stream")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    await_query(query, 120)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sorted(sizes) == [10, 11, 12]  # one file per micro-batch
    got = sorted((m.body.decode(), m.tag) for m in read_topic(client, "sink-stream"))
    assert got == sorted((row["body"], row["tag"]) for rows in files for row in rows)
