"""Streaming write, exactly once: ``python -m examples.exactly_once``.

Starts its own broker, writes 20 messages to ``raw``, and runs a streaming query
``raw`` → upper-cased → ``clean`` with ``exactlyOnce=true``: each task sends half
(invisible) messages and the driver commits exactly one attempt per micro-batch, so a
retried task or a replayed batch after a restart never duplicates. Running the query
again with the same checkpoint writes nothing new.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str, checkpoint: Path) -> None:
    with RocketMQClient(endpoint) as client:
        for topic in ("raw", "clean"):
            client.create_topic(topic, queues=2)
        client.send_batch("raw", [OutgoingMessage(f"item-{i}".encode()) for i in range(20)])
    for attempt in (1, 2):  # the second run finds nothing new to write
        source = (
            spark.readStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", "raw")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "8")
            .load()
        )
        query = (
            source.select(F.upper(F.col("body").cast("string")).alias("body"))
            .writeStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", "clean")
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        print(f"run {attempt}: batches", [p["numInputRows"] for p in query.recentProgress])
    clean = spark.read.format("rocketmq").option("endpoints", endpoint).option("topic", "clean")
    print("messages in 'clean':", clean.load().count())


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-exactly-once", run, spark, checkpoint=True)


if __name__ == "__main__":
    sys.exit(main())
