"""Spark's Kafka-source habits on RocketMQ: ``python -m examples.kafka_habits``.

Starts its own broker, writes 16 messages over 2 queues, then reads them as a user of
``format("kafka")`` would: ``subscribe`` (Kafka's name for ``topics``) with
``minPartitions=4`` (each queue's range cut in two), ``assign`` (one queue only), and
``startingOffsets=group``: a consumer group moved to the latest offsets with ``rmq offset
reset`` (here the client's ``reset_offset``) makes a new query start there.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import DataFrame, SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def _bodies(df: DataFrame) -> list[str]:
    return sorted(bytes(r.body).decode() for r in df.select("body").collect())


def run(spark: SparkSession, endpoint: str) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("clicks", queues=2)
        client.send_batch("clicks", [OutgoingMessage(f"c-{i:02}".encode()) for i in range(16)])
        reader = spark.read.format("rocketmq").option("endpoints", endpoint)
        wide = reader.option("subscribe", "clicks").option("minPartitions", "4").load()
        print(f"subscribe + minPartitions=4: {wide.rdd.getNumPartitions()} partitions,", end=" ")
        print(f"{wide.count()} rows")
        one_queue = (
            spark.read.format("rocketmq")
            .option("endpoints", endpoint)
            .option("assign", json.dumps({"clicks": ["broker-a:1"]}))
            .load()
        )
        queues = sorted({r.queueId for r in one_queue.select("queueId").collect()})
        print(f"assign broker-a:1: {one_queue.count()} rows from queues {queues}")
        client.create_group("dashboard")
        client.reset_offset("dashboard", "clicks", "latest")
        client.send_batch("clicks", [OutgoingMessage(f"new-{i}".encode()) for i in range(2)])
        from_group = (
            spark.read.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", "clicks")
            .option("startingOffsets", "group")
            .option("consumerGroup", "dashboard")
            .load()
        )
        print("startingOffsets=group after a reset to latest:", _bodies(from_group))


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-kafka-habits", run, spark)


if __name__ == "__main__":
    sys.exit(main())
