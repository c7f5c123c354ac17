"""Streaming read with a rate limit: ``python -m examples.stream_read``.

Starts its own broker, writes 25 messages, and reads them with ``maxMessagesPerTrigger``
10 and ``trigger(availableNow=True)``: three micro-batches (10, 10, 5), then the query
stops. The checkpoint (a temporary directory here) is where a restart would continue.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str, checkpoint: Path) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("clicks", queues=2)
        client.send_batch("clicks", [OutgoingMessage(f"click-{i}".encode()) for i in range(25)])
    stream = (
        spark.readStream.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "10")
        .load()
    )

    def show(batch: DataFrame, batch_id: int) -> None:
        print(f"batch {batch_id}: {batch.count()} messages")

    query = (
        stream.writeStream.foreachBatch(show)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("batch sizes:", [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]])


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-stream-read", run, spark, checkpoint=True)


if __name__ == "__main__":
    sys.exit(main())
