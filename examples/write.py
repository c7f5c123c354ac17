"""Batch write: ``python -m examples.write``.

Starts its own broker and writes a DataFrame with ``df.write.format("rocketmq")``: one
message per row, from the columns ``body`` (string or binary), ``tag``, ``keys``
(array<string>), ``properties`` (map<string,string>) and, here, the ``topic`` option
(a ``topic`` column would pick the topic per row). Then reads the messages back.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker_core.client import RocketMQClient
from examples._runner import run_example


def run(spark: SparkSession, endpoint: str) -> None:
    with RocketMQClient(endpoint) as client:
        client.create_topic("payments", queues=2)
    rows = [(i, "EUR" if i % 2 else "USD") for i in range(6)]
    df = spark.createDataFrame(rows, "id int, ccy string")
    out = df.select(
        F.to_json(F.struct("id", "ccy")).alias("body"),
        F.col("ccy").alias("tag"),
        F.array(F.concat(F.lit("pay-"), F.col("id").cast("string"))).alias("keys"),
        F.create_map(F.lit("source"), F.lit("example")).alias("properties"),
    )
    (
        out.write.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", "payments")
        .option("batchSize", "4")
        .mode("append")
        .save()
    )
    back = (
        spark.read.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", "payments")
        .load()
    )
    back.select(F.col("body").cast("string"), "tag", "keys", "properties").orderBy("body").show(
        truncate=False
    )


def main(spark: SparkSession | None = None) -> int:
    return run_example("example-write", run, spark)


if __name__ == "__main__":
    sys.exit(main())
