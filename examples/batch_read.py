"""Batch read with offset and timestamp ranges: ``python -m examples.batch_read``.

Starts its own broker (temporary store), writes 10 messages to a one-queue topic, then
reads ``[3, 7)`` by offsets (``startingOffsets``/``endingOffsets`` JSON, keys
``BROKER:QUEUE``) and everything stored at or after a timestamp (``startingTimestamp``).
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrameReader, SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("orders", queues=1)
        client.send_batch("orders", [OutgoingMessage(f"early-{i}".encode()) for i in range(5)])
        time.sleep(0.05)  # the next messages get a later store timestamp
        since_ms = int(time.time() * 1000)
        client.send_batch("orders", [OutgoingMessage(f"late-{i}".encode()) for i in range(5)])
        broker = client.query_route("orders")[0].broker_name

    def read() -> DataFrameReader:  # a fresh reader each time: options accumulate
        return spark.read.format("rocketmq").option("endpoints", endpoint).option("topic", "orders")

    ranged = (
        read()
        .option("startingOffsets", json.dumps({"orders": {f"{broker}:0": 3}}))
        .option("endingOffsets", json.dumps({"orders": {f"{broker}:0": 7}}))
        .load()
    )
    print("offsets [3, 7):", [r.body.decode() for r in ranged.orderBy("queueOffset").collect()])
    recent = read().option("startingTimestamp", str(since_ms)).load()
    print("since timestamp:", [r.body.decode() for r in recent.orderBy("queueOffset").collect()])


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-batch-read", run, spark)


if __name__ == "__main__":
    sys.exit(main())
