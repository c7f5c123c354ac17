"""spark-read / spark-write: the connector vs Spark's own Parquet source and sink.

Both sides move the same rows through the same `local[2]` session in the same run:

* **spark-read** — N messages of 128 B in 8 queues, read with ``format("rocketmq")`` into
  the ``noop`` sink, vs the same rows (same schema) read from Parquet files into ``noop``.
* **spark-write** — N rows (128 B body + topic) written with ``format("rocketmq")`` vs the
  same DataFrame written as Parquet files.

Throughput is rows per second over the timed action (the data is cached or produced
before the clock starts). Each side runs once untimed first, so neither pays for the
session's cold start (JIT, Python workers and their imports — a first run of even a
trivial Python data source is several times slower than the next); reads are then timed
three times, alternating, and the median kept.

A third side, a no-op Python data source and sink (``bench/spark_ceiling.py``), runs
beside them: it prices the JVM-to-Python hand-over every Python data source pays, so the
details report the best ratio any Python connector could reach and our share of it. The
goal is issue 14's ``share_of_ceiling ≥ 0.8``, stated on the Parquet ratio as
``0.8 × python_ceiling_ratio`` of the same run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import spark_ceiling
from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.server.launcher import launch_broker

BODY_BYTES = 128
QUEUES = 8
SIZES = {"tiny": 2_000, "full": 1_000_000}
CEILING_SHARE_GOAL = 0.8  # issue 14: ≥ 0.8× the no-op Python source / sink, same run


def _spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _produce(endpoint: str, topic: str, count: int) -> None:
    body = bytes(range(BODY_BYTES))
    with RocketMQClient(endpoint) as client:
        client.create_topic(topic, queues=QUEUES)
        for start in range(0, count, 512):
            client.send_batch(topic, [body] * min(512, count - start))


def _read(spark: Any, endpoint: str, root: Path, count: int) -> tuple[float, float, float]:
    _produce(endpoint, "bench-read", count)
    source = (
        spark.read.format("rocketmq")
        .option("endpoints", endpoint)
        .option("topic", "bench-read")
        .load()
    )
    parquet = str(root / "read.parquet")
    source.write.parquet(parquet)  # the same rows, untimed; also warms our side up
    ceiling = (
        spark.read.format(spark_ceiling.NAME)
        .option("rows", str(count))
        .option("partitions", str(QUEUES))
        .option("body", bytes(range(BODY_BYTES)).hex())
        .load()
    )
    sides = [source, spark.read.parquet(parquet), ceiling]
    times: list[list[float]] = [[], [], []]
    for side in sides:  # warm-up
        side.write.format("noop").mode("overwrite").save()
    for _ in range(3):
        for side, timed in zip(sides, times, strict=True):
            timed.append(_timed(side.write.format("noop").mode("overwrite").save))
    ours, baseline, top = (count / statistics.median(t) for t in times)
    return ours, baseline, top


def _write(spark: Any, endpoint: str, root: Path, count: int) -> tuple[float, float, float]:
    from pyspark.sql import functions as F

    rows = (
        spark.range(count)
        .select(F.lit(bytes(range(BODY_BYTES))).alias("body"), F.lit("bench-write").alias("topic"))
        .cache()
    )
    rows.count()
    with RocketMQClient(endpoint) as client:
        client.create_topic("bench-write", queues=QUEUES)
    warm = rows.limit(10_000)
    warm.write.format("rocketmq").option("endpoints", endpoint).mode("append").save()
    warm.write.mode("overwrite").parquet(str(root / "warm.parquet"))
    warm.write.format(spark_ceiling.NAME).mode("append").save()
    ours = _timed(
        lambda: rows.write.format("rocketmq").option("endpoints", endpoint).mode("append").save()
    )
    baseline = _timed(lambda: rows.write.mode("overwrite").parquet(str(root / "write.parquet")))
    top = _timed(lambda: rows.write.format(spark_ceiling.NAME).mode("append").save())
    return count / ours, count / baseline, count / top


def _run(kind: str, size: str) -> list[Result]:
    count = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    broker = launch_broker(root / "broker", config={"store": {"segment_size_bytes": 256 << 20}})
    try:
        spark = _spark()
        spark_ceiling.register(spark)
        run = _read if kind == "read" else _write
        ours, baseline, ceiling = run(spark, broker.endpoint, root, count)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    result = Result(
        f"spark-{kind}",
        ours,
        baseline,
        "rows/s",
        goal=round(CEILING_SHARE_GOAL * ceiling / baseline, 3),
        details={
            "rows": count,
            "body_bytes": BODY_BYTES,
            "queues": QUEUES,
            "python_ceiling_rows_s": round(ceiling),
            "python_ceiling_ratio": round(ceiling / baseline, 3),
            "share_of_ceiling": round(ours / ceiling, 3),
        },
    )
    result.rows = [
        (f"format('rocketmq') {kind}", f"{ours:,.0f} rows/s", f"{count:,} rows of {BODY_BYTES} B"),
        (f"Parquet {kind}", f"{baseline:,.0f} rows/s", "same rows, same session"),
        (
            f"no-op Python {'source' if kind == 'read' else 'sink'}",
            f"{ceiling:,.0f} rows/s",
            "the most any Python data source can do (bench/spark_ceiling.py)",
        ),
    ]
    return [result]


def run_read(size: str) -> list[Result]:
    return _run("read", size)


def run_write(size: str) -> list[Result]:
    return _run("write", size)
