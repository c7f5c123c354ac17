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

A Kafka side (``bench/spark_kafka.py``, issue 24) moves the same rows through Spark's
own Kafka connector on a real Kafka node started for the run: ``details.kafka_rows_s``
and ``details.kafka_ratio`` (ours / Kafka). ``peers=()`` leaves it out.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import real_peers, spark_ceiling, spark_kafka
from bench.report import Result
from broker_core.client import RocketMQClient
from broker_core.server.launcher import launch_broker

BODY_BYTES = 128
QUEUES = 8
SIZES = {"tiny": 2_000, "full": 1_000_000}
CEILING_SHARE_GOAL = 0.8  # issue 14: ≥ 0.8× the no-op Python source / sink, same run


def _spark(jars: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.jars", jars)
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


def _read(spark: Any, endpoint: str, root: Path, count: int, kafka: str | None) -> list[float]:
    """Rows/s of ours, Parquet, the no-op source and (with a bootstrap) Kafka."""
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
    if kafka is not None:
        sides.append(spark_kafka.read_side(spark, kafka, count, bytes(range(BODY_BYTES))))
    times: list[list[float]] = [[] for _ in sides]
    for side in sides:  # warm-up
        side.write.format("noop").mode("overwrite").save()
    for _ in range(3):
        for side, timed in zip(sides, times, strict=True):
            timed.append(_timed(side.write.format("noop").mode("overwrite").save))
    return [count / statistics.median(t) for t in times]


def _write(spark: Any, endpoint: str, root: Path, count: int, kafka: str | None) -> list[float]:
    """Rows/s of ours, Parquet, the no-op sink and (with a bootstrap) Kafka."""
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
    actions = [
        rows.write.format("rocketmq").option("endpoints", endpoint).mode("append").save,
        lambda: rows.write.mode("overwrite").parquet(str(root / "write.parquet")),
        rows.write.format(spark_ceiling.NAME).mode("append").save,
    ]
    if kafka is not None:
        spark_kafka.write_action(warm, kafka)()
        actions.append(spark_kafka.write_action(rows, kafka))
    return [count / _timed(action) for action in actions]


def _measure(kind: str, count: int, root: Path, peers: Sequence[str]) -> tuple[list[float], Any]:
    """Start our broker (and Kafka when asked), run the sides; rows/s of each."""
    broker = launch_broker(root / "broker", config={"store": {"segment_size_bytes": 256 << 20}})
    node = spark_kafka.start(root / "kafka") if "kafka" in peers else None
    try:
        spark = _spark(spark_kafka.spark_jars() if node else "")
        spark_ceiling.register(spark)
        run = _read if kind == "read" else _write
        return run(spark, broker.endpoint, root, count, node.bootstrap if node else None), node
    finally:
        broker.stop()
        if node is not None:
            node.stop()


def _kafka_details(ours: float, rate: float) -> dict[str, Any]:
    return {
        "kafka_rows_s": round(rate),
        "kafka_ratio": round(ours / rate, 3),
        **spark_kafka.versions(),
        "kafka_partitions": spark_kafka.PARTITIONS,
    }


def _run(kind: str, size: str, peers: Sequence[str]) -> list[Result]:
    count = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    try:
        rates, node = _measure(kind, count, root, peers)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours, baseline, ceiling = rates[:3]
    sink = "source" if kind == "read" else "sink"
    figures = {"ours": ours, "Parquet": baseline, f"no-op Python {sink}": ceiling}
    details: dict[str, Any] = {
        "rows": count,
        "body_bytes": BODY_BYTES,
        "queues": QUEUES,
        "python_ceiling_rows_s": round(ceiling),
        "python_ceiling_ratio": round(ceiling / baseline, 3),
        "share_of_ceiling": round(ours / ceiling, 3),
    }
    if node is not None:
        details.update(_kafka_details(ours, rates[3]))
        figures["Kafka"] = rates[3]
    details["figures"] = {k: round(v) for k, v in figures.items()}
    result = Result(
        f"spark-{kind}",
        ours,
        baseline,
        "rows/s",
        goal=round(CEILING_SHARE_GOAL * ceiling / baseline, 3),
        details=details,
        baseline_name="Parquet",
    )
    result.rows = [
        (f"format('rocketmq') {kind}", f"{ours:,.0f} rows/s", f"{count:,} rows of {BODY_BYTES} B"),
        (f"Parquet {kind}", f"{baseline:,.0f} rows/s", "same rows, same session"),
        (
            f"no-op Python {sink}",
            f"{ceiling:,.0f} rows/s",
            "the most any Python data source can do (bench/spark_ceiling.py)",
        ),
    ]
    if node is not None:
        result.rows.append(
            (
                f"format('kafka') {kind}",
                f"{rates[3]:,.0f} rows/s",
                f"same rows, Kafka {details['kafka_version']}, {spark_kafka.PARTITIONS} partitions"
                f"; ours / Kafka {details['kafka_ratio']:.3f}",
            )
        )
    return [result]


def run_read(
    size: str, peers: Sequence[str] = real_peers.WORKLOAD_PEERS["spark-read"]
) -> list[Result]:
    return _run("read", size, peers)


def run_write(
    size: str, peers: Sequence[str] = real_peers.WORKLOAD_PEERS["spark-write"]
) -> list[Result]:
    return _run("write", size, peers)
