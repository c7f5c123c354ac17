"""Run by the wheel test with a fresh venv's Python, outside the repository: a write, a
batch read and an availableNow streaming read through format("rocketmq"), found by
Spark's pyspark_* lookup in that venv. Prints one JSON line with what it saw.

Usage: python wheel_job.py ENDPOINT TOPIC CHECKPOINT_DIR
"""

import json
import os
import sys


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from pyspark.sql import SparkSession

    endpoint, topic, checkpoint = sys.argv[1:4]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    (
        spark.createDataFrame([(f"w-{i}",) for i in range(5)], "body string")
        .write.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    batch = (
        spark.read.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", topic)
        .load()
        .collect()
    )
    streamed: list[bytes] = []
    query = (
        spark.readStream.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(lambda df, _id: streamed.extend(bytes(r["body"]) for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    import connector

    print(
        json.dumps(
            {
                "batch": sorted(bytes(r["body"]).decode() for r in batch),
                "batch_offsets": sorted([r["queueId"], r["queueOffset"]] for r in batch),
                "stream": sorted(b.decode() for b in streamed),
                "connector_file": connector.__file__,
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
