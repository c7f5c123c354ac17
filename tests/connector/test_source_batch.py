"""Batch reads (``spark.read.format("rocketmq")``) against a real broker and ``local[2]`` Spark.

No test registers the ``rocketmq`` format (``spark.dataSource.register`` is never called
for it): Spark finds it through ``pyspark_rocketmq.DefaultSource``.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, EqualTo, GreaterThanOrEqual, In, IsNotNull, LessThan

import pyspark_rocketmq
from broker_core.client import OutgoingMessage, ReceivedMessage, RocketMQClient
from connector import SCHEMA
from connector.options import parse_read_options
from connector.source import QueueRange, RocketMQBatchReader
from tests.connector.conftest import BrokerProcess, new_topic, produce, read_batch

UTC = dt.UTC


def pull_all(client: RocketMQClient, topic: str, queues: int) -> list[ReceivedMessage]:
    """Every message of ``topic``, pulled with the client: the oracle for the source."""
    out = []
    for queue_id in range(queues):
        offset = 0
        while True:
            batch = client.pull("GID_oracle", topic, queue_id, offset, 256)
            out.extend(batch.messages)
            if batch.next_offset >= batch.max_offset:
                break
            offset = batch.next_offset
    return out


def expected_df(
    spark: SparkSession, messages: list[ReceivedMessage], include_properties: bool = True
) -> DataFrame:
    def ts(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=UTC)

    rows = [
        (
            m.topic,
            "broker-a",
            m.queue_id,
            m.queue_offset,
            m.message_id,
            m.tag,
            list(m.keys),
            bytearray(m.body),
            dict(m.properties) if include_properties else None,
            ts(m.born_timestamp_ms),
            ts(m.store_timestamp_ms),
            m.message_group,
        )
        for m in messages
    ]
    return spark.createDataFrame(rows, SCHEMA)


def assert_same_rows(df: DataFrame, expected: DataFrame) -> None:
    """chispa comparison in queue order (maps cannot be sorted on, so order by position)."""
    order = ("topic", "broker", "queueId", "queueOffset")
    assert_df_equality(df.orderBy(*order), expected.orderBy(*order))


def offsets_of(df: DataFrame) -> list[tuple[int, int]]:
    return sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect())


@pytest.fixture(scope="module")
def mixed(client: RocketMQClient) -> str:
    """A 3-queue topic: 30 messages tagged A/B/C (10 each), keys, properties, a FIFO group."""
    topic = new_topic(client, "mixed", queues=3)
    messages = [
        OutgoingMessage(
            f"body-{i}".encode(),
            "ABC"[i % 3],
            (f"k{i}",) if i % 2 else (),
            {"region": "eu" if i % 4 == 0 else "us", "n": str(i)},
            "grp-1" if i % 5 == 0 else None,
        )
        for i in range(30)
    ]
    client.send_batch(topic, messages)
    return topic


def test_reads_everything_exactly_without_registration(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, mixed: str
) -> None:
    df = read_batch(spark, broker.endpoint, topic=mixed)
    assert df.schema == SCHEMA
    expected = expected_df(spark, pull_all(client, mixed, 3))
    assert expected.count() == 30
    assert_same_rows(df, expected)


def test_static_registration_hook() -> None:
    assert issubclass(pyspark_rocketmq.DefaultSource, DataSource)
    assert pyspark_rocketmq.DefaultSource.name() == "rocketmq"


def test_one_partition_per_queue_with_work(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "parts", queues=4)
    produce(client, topic, 6)  # round robin: queues 0,1 get 2, queues 2,3 get 1
    df = read_batch(spark, broker.endpoint, topic=topic)
    assert df.rdd.getNumPartitions() == 4
    produce_empty = new_topic(client, "empty", queues=3)
    assert read_batch(spark, broker.endpoint, topic=produce_empty).count() == 0


def test_json_offset_range(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, mixed: str
) -> None:
    start = json.dumps({mixed: {"broker-a:0": 2, "broker-a:1": -2}})
    end = json.dumps({mixed: {"broker-a:0": 5, "broker-a:2": 3}})
    df = read_batch(spark, broker.endpoint, topic=mixed, startingOffsets=start, endingOffsets=end)
    # queue 0: [2, 5); queue 1: -2 (earliest) to latest (not named); queue 2: earliest to 3
    everything = pull_all(client, mixed, 3)
    queue_1 = [(1, m.queue_offset) for m in everything if m.queue_id == 1]
    assert offsets_of(df) == [(0, 2), (0, 3), (0, 4), *queue_1, (2, 0), (2, 1), (2, 2)]
    expected = expected_df(
        spark, [m for m in everything if (m.queue_id, m.queue_offset) in set(offsets_of(df))]
    )
    assert_same_rows(df, expected)


def test_timestamp_range(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = new_topic(client, "times", queues=2)
    produce(client, topic, 6, prefix="early")
    last_store_ms = max(m.store_timestamp_ms for m in pull_all(client, topic, 2))
    while time.time() * 1000 <= last_store_ms + 1:  # the next store time must be later
        time.sleep(0.002)
    boundary_ms = int(time.time() * 1000)
    produce(client, topic, 4, prefix="late")
    late = read_batch(spark, broker.endpoint, topic=topic, startingTimestamp=str(boundary_ms))
    early = read_batch(spark, broker.endpoint, topic=topic, endingTimestamp=str(boundary_ms))
    assert sorted(r.body.decode() for r in late.select("body").collect()) == [
        f"late-{i}" for i in range(4)
    ]
    assert sorted(r.body.decode() for r in early.select("body").collect()) == [
        f"early-{i}" for i in range(6)
    ]


def test_tag_filters_are_pushed_to_the_broker(
    spark: SparkSession, broker: BrokerProcess, mixed: str
) -> None:
    df = read_batch(spark, broker.endpoint, topic=mixed)
    only_a = df.filter(F.col("tag") == "A")
    a_or_b = df.filter(F.col("tag").isin("A", "B"))
    assert sorted(r.tag for r in only_a.select("tag").collect()) == ["A"] * 10
    assert sorted({r.tag for r in a_or_b.select("tag").collect()}) == ["A", "B"]
    assert a_or_b.count() == 20
    for query in (only_a, a_or_b):  # Spark no longer filters on the tag: the broker did
        plan = query._jdf.queryExecution().executedPlan().toString()
        assert "tag#" in plan and " = A)" not in plan and "IN (A,B)" not in plan, plan


def test_reads_work_with_spark_pushdown_config_off(
    spark: SparkSession, broker: BrokerProcess, mixed: str
) -> None:
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "false")  # Spark's default: Spark then filters the rows itself
    try:
        only_a = read_batch(spark, broker.endpoint, topic=mixed).filter(F.col("tag") == "A")
        assert sorted(r.tag for r in only_a.select("tag").collect()) == ["A"] * 10
        plan = only_a._jdf.queryExecution().executedPlan().toString()
        assert " = A)" in plan, plan  # not pushed: Spark evaluates the filter
    finally:
        spark.conf.set(key, "true")


def test_pushed_tags_reduce_what_is_pulled(broker: BrokerProcess, mixed: str) -> None:
    """A counting check without Spark: the reader's own partitions and reads."""
    options = parse_read_options({"endpoints": broker.endpoint, "topic": mixed}, streaming=False)
    reader = RocketMQBatchReader(options, SCHEMA)
    rest = reader.pushFilters([EqualTo(("tag",), "A"), IsNotNull(("tag",))])
    assert rest == [IsNotNull(("tag",))]
    parts = reader.partitions()
    assert {p.filter_expression for p in parts} == {"A"}
    pulled = sum(batch.num_rows for p in parts for batch in reader.read(p))
    assert pulled == 10  # of 30: the broker sent only tag A
    reader.pushFilters([In(("tag",), ("B", "C"))])  # A ∩ {B, C} = nothing: no partitions
    assert reader.partitions() == []


def test_queue_and_offset_filters_prune_the_plan(
    spark: SparkSession, broker: BrokerProcess, mixed: str
) -> None:
    options = parse_read_options({"endpoints": broker.endpoint, "topic": mixed}, streaming=False)
    reader = RocketMQBatchReader(options, SCHEMA)
    assert (
        reader.pushFilters(
            [
                EqualTo(("queueId",), 1),
                GreaterThanOrEqual(("queueOffset",), 3),
                LessThan(("queueOffset",), 6),
            ]
        )
        == []
    )
    parts = reader.partitions()
    assert [(p.ref.queue_id, p.start, p.end) for p in parts if isinstance(p, QueueRange)] == [
        (1, 3, 6)
    ]
    df = read_batch(spark, broker.endpoint, topic=mixed).filter(
        (F.col("queueId") == 1) & (F.col("queueOffset") >= 3) & (F.col("queueOffset") < 6)
    )
    assert offsets_of(df) == [(1, 3), (1, 4), (1, 5)]


def test_tag_and_sql_options(spark: SparkSession, broker: BrokerProcess, mixed: str) -> None:
    tagged = read_batch(spark, broker.endpoint, topic=mixed, tagExpression="A || C")
    assert sorted({r.tag for r in tagged.collect()}) == ["A", "C"] and tagged.count() == 20
    narrowed = tagged.filter(F.col("tag") == "C")  # option ∩ pushed filter
    assert narrowed.count() == 10
    eu = read_batch(spark, broker.endpoint, topic=mixed, sqlFilter="region = 'eu' AND n > 10")
    got = sorted(int(r.properties["n"]) for r in eu.collect())
    assert got == [i for i in range(11, 30) if i % 4 == 0]
    eu_a = eu.filter(F.col("tag") == "A")  # not pushable next to SQL: Spark filters
    assert sorted(int(r.properties["n"]) for r in eu_a.collect()) == [12, 24]


def test_include_properties_false(spark: SparkSession, broker: BrokerProcess, mixed: str) -> None:
    df = read_batch(spark, broker.endpoint, topic=mixed, includeProperties="false")
    assert df.filter(F.col("properties").isNotNull()).count() == 0
    assert df.count() == 30


def test_topics_and_pattern(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    first, second = new_topic(client, "pat", queues=1), new_topic(client, "pat", queues=2)
    produce(client, first, 3)
    produce(client, second, 4)
    both = read_batch(spark, broker.endpoint, topics=f"{first},{second}")
    assert sorted(both.groupBy("topic").count().collect()) == sorted([(first, 3), (second, 4)])
    prefix = first.rsplit("-", 2)[0]
    pattern = read_batch(spark, broker.endpoint, topicPattern=f"{prefix}-.*")
    assert {r.topic for r in pattern.select("topic").distinct().collect()} >= {first, second}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "soon"}, "option 'startingOffsets'"),
        ({"maxMessagesPerTrigger": "5"}, "option 'maxMessagesPerTrigger'"),
        ({"startingOffsets": '{"T": {"broker-a:9": 0}}'}, "option 'startingOffsets'.*broker-a:9"),
        ({"endingOffsets": '{"T": {"broker-a:0": 999}}'}, "option 'endingOffsets'.*beyond"),
        (
            {
                "startingOffsets": '{"T": {"broker-a:0": 5}}',
                "endingOffsets": '{"T": {"broker-a:0": 2}}',
            },
            "option 'startingOffsets'.*after its end",
        ),
        ({"topic": "no-such-topic-anywhere"}, "no-such-topic-anywhere"),
        ({"colour": "red"}, "option 'colour'"),
    ],
)
def test_errors_through_spark_name_the_option(
    spark: SparkSession, broker: BrokerProcess, mixed: str, options: dict[str, str], message: str
) -> None:
    resolved = {k: v.replace('"T"', json.dumps(mixed)) for k, v in options.items()}
    resolved.setdefault("topic", mixed)
    with pytest.raises(PySparkException, match=message):
        read_batch(spark, broker.endpoint, **resolved).collect()
