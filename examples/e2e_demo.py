"""The end-to-end demo: broker → order events → Spark order-events pipeline → results topic.

``python -m examples.e2e_demo`` starts a broker on a loopback port with a temporary store,
creates the ``orders`` and ``order-stats`` topics, sends a few thousand realistic order
events (five statuses, forty customers, event times spread over ten minutes) with
``RocketMQClient.send_batch``, runs :mod:`spark_jobs.order_events` on them (availableNow,
several micro-batches), reads ``order-stats`` back with ``format("rocketmq")``, prints
revenue per status per minute, and stops the broker. About a minute on two cores.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.console.server import start_console
from broker_core.server.launcher import launch_broker
from spark_jobs import order_events
from spark_jobs.common import session

INPUT_TOPIC, OUTPUT_TOPIC = "orders", "order-stats"
STATUSES = {"CREATED": 0.35, "PAID": 0.3, "SHIPPED": 0.2, "DELIVERED": 0.1, "CANCELLED": 0.05}
SPAN_MS = 10 * 60_000


def order_events_json(count: int, start_ms: int, seed: int = 7) -> list[bytes]:
    """``count`` order-event bodies with event times in ``[start_ms, start_ms + 10 min)``.

    They arrive roughly in event-time order (up to 30 s out of order), well inside the
    pipeline's 2-minute watermark, so no event is dropped as late.
    """
    rng = random.Random(seed)
    statuses, weights = list(STATUSES), list(STATUSES.values())
    times = sorted(
        (rng.randrange(SPAN_MS) for _ in range(count)), key=lambda t: t + rng.randrange(30_000)
    )
    events = []
    for i, offset_ms in enumerate(times):
        at_ms = start_ms + offset_ms
        events.append(
            json.dumps(
                {
                    "order_id": f"o-{i:05d}",
                    "customer": f"c-{rng.randrange(40):02d}",
                    "amount_cents": rng.randrange(500, 20_000),
                    "status": rng.choices(statuses, weights)[0],
                    "event_time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at_ms / 1000))
                    + f".{at_ms % 1000:03d}Z",
                }
            ).encode()
        )
    return events


def produce(client: RocketMQClient, topic: str, bodies: list[bytes], chunk: int = 500) -> None:
    for i in range(0, len(bodies), chunk):
        client.send_batch(topic, [OutgoingMessage(b, tag="order") for b in bodies[i : i + chunk]])


def latest_results(spark: SparkSession, endpoints: str, topic: str) -> DataFrame:
    """The newest result per (window, status) on ``topic``, ordered by window and status."""
    raw = spark.read.format("rocketmq").option("endpoints", endpoints).option("topic", topic).load()
    schema = (
        "window_start string, window_end string, status string, orders long, "
        "revenue_cents long, emitted_at string"
    )
    rows = raw.select(
        F.from_json(F.col("body").cast("string"), schema).alias("r"), "queueOffset"
    ).select("r.*", "queueOffset")
    newest = Window.partitionBy("window_start", "status").orderBy(
        F.col("emitted_at").desc(), F.col("queueOffset").desc()
    )
    return (
        rows.withColumn("n", F.row_number().over(newest))
        .where("n = 1")
        .select(
            F.substring("window_start", 12, 5).alias("minute"),
            "status",
            "orders",
            F.format_number(F.col("revenue_cents") / 100, 2).alias("revenue"),
        )
        .orderBy("minute", "status")
    )


@contextmanager
def demo_broker() -> Iterator[str]:
    """A broker with a temporary store for the demo; yields its endpoint."""
    with tempfile.TemporaryDirectory(prefix="rocketmq-demo-") as tmp:
        broker = launch_broker(Path(tmp))
        try:
            yield broker.endpoint
        finally:
            broker.stop()


def run_demo(spark: SparkSession, endpoints: str, workdir: Path, events: int = 3000) -> DataFrame:
    """Produce, run the pipeline, and return the result table (also used by the tests)."""
    with RocketMQClient(endpoints) as client:
        client.create_topic(INPUT_TOPIC, queues=4)
        client.create_topic(OUTPUT_TOPIC, queues=2)
        start_ms = (int(time.time() * 1000) - SPAN_MS) // 60_000 * 60_000
        produce(client, INPUT_TOPIC, order_events_json(events, start_ms))
    print(f"sent {events} order events to '{INPUT_TOPIC}' at {endpoints}")
    query = order_events.run(
        spark,
        endpoints=endpoints,
        input_topic=INPUT_TOPIC,
        output_topic=OUTPUT_TOPIC,
        checkpoint=str(workdir / "checkpoint"),
        max_messages_per_trigger=1000,
    )
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print(f"order-events pipeline: micro-batches of {batches} messages")
    return latest_results(spark, endpoints, OUTPUT_TOPIC)


def main() -> int:
    started = time.monotonic()
    spark = session("rocketmq-e2e-demo")
    spark.sparkContext.setLogLevel("ERROR")
    with demo_broker() as endpoints, tempfile.TemporaryDirectory() as tmp:
        console = start_console(endpoints=endpoints)  # rmq console, for as long as the demo runs
        print(f"web console: {console.url}")
        try:
            table = run_demo(spark, endpoints, Path(tmp))
        finally:
            console.stop()
        print(f"\nrevenue per status per minute (from '{OUTPUT_TOPIC}'):")
        table.show(100, truncate=False)
    spark.stop()
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
