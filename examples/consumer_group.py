"""Consumer-group offsets: ``python -m examples.consumer_group``.

Starts its own broker, writes 12 messages, and reads them as a stream with
``consumerGroup=analytics`` and ``commitOffsets=true``: after each micro-batch the
source commits its end offsets as the group's offsets, so broker tools
(``client.group_progress``) show the query's lag. Spark's checkpoint stays the source
of truth for where the query resumes; the committed offsets are for monitoring.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str, checkpoint: Path) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("views", queues=2)
        client.send_batch("views", [OutgoingMessage(f"view-{i}".encode()) for i in range(12)])
        stream = (
            spark.readStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", "views")
            .option("startingOffsets", "earliest")
            .option("consumerGroup", "analytics")
            .option("commitOffsets", "true")
            .option("maxMessagesPerTrigger", "5")
            .load()
        )

        def ignore(batch: DataFrame, batch_id: int) -> None:
            batch.count()

        query = (
            stream.writeStream.foreachBatch(ignore)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = client.group_progress("analytics", "views")
        for q in progress["queues"]:
            print(f"queue {q['queue_id']}: committed {q['consumer_offset']}, lag {q['lag']}")
        print("total lag:", progress["total_lag"])


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-consumer-group", run, spark, checkpoint=True)


if __name__ == "__main__":
    sys.exit(main())
