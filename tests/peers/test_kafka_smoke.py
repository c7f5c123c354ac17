"""The Kafka peer's fetch and start path, and Spark's Kafka connector on it (issue 24).

One KRaft node for the module (``peers/kafka.py``); the suite's shared SparkSession gets the
connector's jars with ``ADD JAR`` (``peers.kafka.add_to_session``), so no second JVM starts.
Rows go to Kafka through ``format("kafka")`` and are read back the same way, offset by offset.
The session's driver does not see classes added by ``ADD JAR`` when it decodes a failed
task's reason, so a failure shows as ``UnknownReason``: the executor's own error is in the
captured stderr (``ERROR Executor: Exception in task``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from peers import kafka
from tests.connector.conftest import spark  # noqa: F401  (the one SparkSession of the run)

ROWS = 300
PARTITIONS = 3


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka.KafkaNode]:
    started = kafka.start(tmp_path_factory.mktemp("kafka"), partitions=PARTITIONS)
    yield started
    code = started.stop()
    assert code in (0, kafka.SIGTERM_EXIT), started.tail()  # a clean shutdown
    assert started.process.poll() is not None


@pytest.fixture(scope="module")
def kafka_spark(spark: SparkSession) -> SparkSession:  # noqa: F811
    kafka.add_to_session(spark)
    return spark


def test_the_connector_jars_leave_out_what_pyspark_ships() -> None:
    shipped = {kafka.artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    names = {kafka.artifact(j) for j in kafka.spark_jars()}
    assert {"spark-sql-kafka-0-10_2.13", "kafka-clients", "commons-pool2"} <= names
    assert not names & shipped
    assert (
        kafka.artifact(Path("spark-sql-kafka-0-10_2.13-4.2.0.jar")) == "spark-sql-kafka-0-10_2.13"
    )


def test_rows_written_through_format_kafka_read_back_in_order(
    node: kafka.KafkaNode, kafka_spark: SparkSession
) -> None:
    rows = kafka_spark.range(ROWS).select(
        F.format_string("k-%d", "id").alias("key"),
        F.concat(F.lit(b"\x00\xff"), F.col("id").cast("string").cast("binary")).alias("value"),
        (F.col("id") % PARTITIONS).cast("int").alias("partition"),
    )
    # one writing task, so each partition receives its rows in id order
    writer = rows.coalesce(1).write.format("kafka").option("topic", "smoke")
    writer = writer.option("kafka.bootstrap.servers", node.bootstrap)
    for key, value in kafka.PATIENT_PRODUCER.items():  # the node may be starved of CPU
        writer = writer.option(f"kafka.{key}", value)
    writer.save()
    read = (
        kafka_spark.read.format("kafka")
        .option("kafka.bootstrap.servers", node.bootstrap)
        .option("subscribe", "smoke")
        .load()
        .collect()
    )
    assert len(read) == ROWS
    for partition in range(PARTITIONS):
        got = sorted((r.offset, r.key, r.value) for r in read if r.partition == partition)
        ids = range(partition, ROWS, PARTITIONS)
        assert [o for o, _, _ in got] == list(range(len(ids)))
        assert [k for _, k, _ in got] == [f"k-{i}".encode() for i in ids]
        assert [bytes(v) for _, _, v in got] == [b"\x00\xff" + str(i).encode() for i in ids]
    assert {r.topic for r in read} == {"smoke"}
