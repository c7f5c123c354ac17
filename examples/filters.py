"""Broker-side filters: ``python -m examples.filters``.

Starts its own broker and writes 8 messages tagged ``A``/``B`` with a ``region``
property. ``tagExpression`` keeps tags (``A`` or ``A || B``); ``sqlFilter`` is a SQL92
expression over the properties (and ``TAGS``). The broker filters: unmatched messages
never leave it. The two options exclude each other.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("events", queues=1)
        client.send_batch(
            "events",
            [
                OutgoingMessage(
                    f"e-{i}".encode(),
                    tag="AB"[i % 2],
                    properties={"region": "eu" if i < 4 else "us"},
                )
                for i in range(8)
            ],
        )
    for name, value in [("tagExpression", "A"), ("sqlFilter", "region = 'eu' AND TAGS = 'B'")]:
        rows = (
            spark.read.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", "events")
            .option(name, value)
            .load()
            .orderBy("queueOffset")
            .collect()
        )
        print(f"{name}={value!r}:", [r.body.decode() for r in rows])


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-filters", run, spark)


if __name__ == "__main__":
    sys.exit(main())
