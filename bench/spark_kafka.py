"""The Kafka side of spark-read / spark-write: the same rows through Spark's own Kafka
connector (``format("kafka")``) on a real Kafka node, in the same session and run.

The node (``peers/kafka.py``): Kafka 4.x, one KRaft node on loopback, heap 512 MiB, 64 MiB
segments, every log flushed each 500 ms like our broker's async flush, topics auto-created
with :data:`PARTITIONS` partitions (our side's 8 queues). The connector runs with its
defaults, as a data engineer would start with it (kafka-clients' producer: acks=all,
idempotence on; the source: one Spark partition per Kafka partition), except that the
producer waits longer before it gives up on a batch (``kafka.PATIENT_PRODUCER``: a loaded
machine stalled the node past the 120 s default once).

* read: the rows (values of the bench's 128 B body) are written to the topic through
  ``format("kafka")`` before the clock starts; the timed side is
  ``spark.read.format("kafka")…load()`` into the ``noop`` sink, like ours.
* write: the bench's cached rows with ``body`` renamed ``value`` (the connector's column)
  written to an auto-created topic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from peers import kafka

PARTITIONS = 8
READ_TOPIC = "bench-read"
WRITE_TOPIC = "bench-write"


def start(workdir: Path) -> kafka.KafkaNode:
    """One node with :data:`PARTITIONS` partitions per auto-created topic."""
    return kafka.start(workdir, partitions=PARTITIONS)


def spark_jars() -> str:
    """The ``spark.jars`` value that gives a new session the connector."""
    return ",".join(str(j) for j in kafka.spark_jars())


def versions() -> dict[str, str]:
    """``{"kafka_version": …, "kafka_spark_connector": …}`` for a result's details."""
    found = kafka.versions()
    return {
        "kafka_version": found["kafka_2.13"],
        "kafka_spark_connector": found["spark-sql-kafka-0-10_2.13"],
    }


def _writer(frame: Any, bootstrap: str, topic: str) -> Any:
    writer = (
        frame.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
    )
    for key, value in kafka.PATIENT_PRODUCER.items():
        writer = writer.option(f"kafka.{key}", value)
    return writer


def read_side(spark: Any, bootstrap: str, count: int, body: bytes) -> Any:
    """Fill :data:`READ_TOPIC` with ``count`` values of ``body`` (untimed); the timed
    DataFrame that reads them all back."""
    from pyspark.sql import functions as F

    rows = spark.range(count).select(F.lit(body).alias("value"))
    _writer(rows, bootstrap, READ_TOPIC).save()
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", READ_TOPIC)
        .load()
    )


def write_action(rows: Any, bootstrap: str) -> Any:
    """The timed action that writes the bench's rows (``body``, ``topic``) to Kafka."""
    frame = rows.select(rows["body"].alias("value"))
    writer = _writer(frame, bootstrap, WRITE_TOPIC)
    return writer.save
