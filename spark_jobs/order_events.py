"""order-events: order JSON → revenue and count per status per event-time minute → a topic.

Input messages carry one order event each as a JSON object (:data:`ORDER_SCHEMA`)::

    {"order_id": "o-17", "customer": "c-3", "amount_cents": 1299, "status": "PAID",
     "event_time": "2026-11-22T10:03:12Z"}

Input schema (a JSON object per message body; other keys are ignored):

==============  ===========================  =========================================
key             type                         needed
==============  ===========================  =========================================
event_time      ISO-8601 timestamp (string)  yes: the event-time window
status          string                       yes: the group and the result's tag
amount_cents    integer                      no (counts as 0)
order_id        string                       no
customer        string                       no
==============  ===========================  =========================================

Bodies that are not such an object (not JSON, or without ``event_time``/``status``, like
``{"id": 1}``) are skipped and counted: the job reports how many it could not use
(:func:`skipped_rows`, the query's observed metric ``order_events_input``).
Events are grouped into 1-minute tumbling windows of ``event_time`` per ``status`` with a
2-minute watermark (events later than that are dropped by Spark). Every result is one
JSON message on the output topic, tagged with the status, keyed ``STATUS@WINDOW_START``::

    {"window_start": "2026-11-22T10:03:00.000Z", "window_end": "2026-11-22T10:04:00.000Z",
     "status": "PAID", "orders": 42, "revenue_cents": 51234,
     "emitted_at": "2026-11-22T10:09:00.123Z"}

Output mode ``update`` (default) emits running totals whenever a window changes; the
newest ``emitted_at`` per key is the current total. ``append`` emits each window once,
final, after the watermark passes its end (windows near the newest event wait for
later events). The checkpoint makes restarts continue where the last run stopped.

Run::

    python -m spark_jobs.order_events --endpoints 127.0.0.1:8081 --input-topic orders \\
        --output-topic order-stats --checkpoint /tmp/ckpt/order-events
    spark-submit --master local[2] spark_jobs/order_events.py --help
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.args import add_streaming, job_parser
from spark_jobs.common import finish, session

ORDER_SCHEMA = StructType(
    [
        StructField("order_id", StringType()),
        StructField("customer", StringType()),
        StructField("amount_cents", LongType()),
        StructField("status", StringType()),
        StructField("event_time", TimestampType()),
    ]
)
WINDOW = "1 minute"
WATERMARK = "2 minutes"
_ISO_MS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


OBSERVED = "order_events_input"  # observed metric: input rows and the rows skipped


def parse_orders(messages: DataFrame) -> DataFrame:
    """Rows of :data:`ORDER_SCHEMA` from source rows (``body``); bad bodies are dropped,
    and counted per micro-batch in the observed metric :data:`OBSERVED`."""
    event = F.from_json(F.col("body").cast("string"), ORDER_SCHEMA)
    parsed = messages.select(event.alias("e")).select("e.*")
    usable = F.col("event_time").isNotNull() & F.col("status").isNotNull()
    counted = parsed.observe(
        OBSERVED,
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(F.when(usable, 0).otherwise(1)), F.lit(0)).alias("skipped"),
    )
    return counted.where(usable)


def skipped_rows(query: StreamingQuery) -> int:
    """Input rows the query could not use (not order JSON), over its recent progress."""
    skipped = 0
    for progress in query.recentProgress:
        row = progress["observedMetrics"].get(OBSERVED)  # a Row, in batches with input
        skipped += int(row["skipped"]) if row is not None else 0
    return skipped


def revenue_per_window(
    orders: DataFrame, *, window: str = WINDOW, watermark: str = WATERMARK
) -> DataFrame:
    """window_start, window_end, status, orders, revenue_cents (null amounts count as 0)."""
    grouped = orders.withWatermark("event_time", watermark).groupBy(
        F.window("event_time", window).alias("w"), "status"
    )
    totals = grouped.agg(
        F.count(F.lit(1)).alias("orders"),
        F.coalesce(F.sum("amount_cents"), F.lit(0)).alias("revenue_cents"),
    )
    return totals.select(
        F.col("w.start").alias("window_start"),
        F.col("w.end").alias("window_end"),
        "status",
        "orders",
        "revenue_cents",
    )


def _iso(column: str) -> Column:
    return F.date_format(F.col(column), _ISO_MS)


def to_messages(results: DataFrame) -> DataFrame:
    """Result rows as sink rows: JSON ``body``, ``tag`` = status, ``keys`` = [STATUS@START]."""
    body = F.to_json(
        F.struct(
            _iso("window_start").alias("window_start"),
            _iso("window_end").alias("window_end"),
            "status",
            "orders",
            "revenue_cents",
            F.date_format(F.current_timestamp(), _ISO_MS).alias("emitted_at"),
        )
    )
    key = F.concat(F.col("status"), F.lit("@"), _iso("window_start"))
    return results.select(
        body.alias("body"), F.col("status").alias("tag"), F.array(key).alias("keys")
    )


def _batch_sender(endpoints: str, topic: str) -> Callable[[DataFrame, int], None]:
    """foreachBatch function: send one micro-batch's rows (runs on the driver).

    A micro-batch replayed after a crash is sent again; its messages carry the same
    totals, so the newest message per key stays right (at least once, idempotent by key).
    """

    def send(batch: DataFrame, batch_id: int) -> None:
        del batch_id
        (
            batch.write.format("rocketmq")
            .mode("append")
            .option("endpoints", endpoints)
            .option("topic", topic)
            .save()
        )

    return send


def start_pipeline(
    spark: SparkSession,
    *,
    endpoints: str,
    input_topic: str,
    output_topic: str,
    checkpoint: str,
    starting_offsets: str = "earliest",
    output_mode: str = "update",
    trigger_seconds: int | None = None,
    max_messages_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the streaming query (availableNow unless ``trigger_seconds``); returns it."""
    reader = (
        spark.readStream.format("rocketmq")
        .option("endpoints", endpoints)
        .option("topic", input_topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_messages_per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", str(max_messages_per_trigger))
    results = to_messages(revenue_per_window(parse_orders(reader.load())))
    writer = results.writeStream.outputMode(output_mode).option("checkpointLocation", checkpoint)
    if output_mode == "update":
        # Spark's Python stream sinks take append and complete only: update goes through
        # foreachBatch and a batch write of each micro-batch's changed windows.
        writer = writer.foreachBatch(_batch_sender(endpoints, output_topic))
        writer = writer.queryName("order-events")
    else:  # no queryName: the rocketmq sink refuses the 'queryname' option Spark passes on
        writer = (
            writer.format("rocketmq").option("endpoints", endpoints).option("topic", output_topic)
        )
    if trigger_seconds is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def run(spark: SparkSession, **kwargs: object) -> StreamingQuery:
    """Start the pipeline and wait for it to end (an availableNow run ends by itself).

    Raises the query's exception if it failed. ``kwargs`` are those of
    :func:`start_pipeline`.
    """
    query = start_pipeline(spark, **kwargs)  # type: ignore[arg-type]
    return finish(query)


def parser() -> argparse.ArgumentParser:
    p = job_parser("order_events", __doc__)
    p.add_argument("--input-topic", required=True, help="topic of order-event JSON messages")
    p.add_argument("--output-topic", required=True, help="topic the results are sent to")
    add_streaming(p, max_messages_help="rate limit: at most N input messages per micro-batch")
    p.add_argument(
        "--output-mode",
        choices=("update", "append", "complete"),
        default="update",
        help="update: changed windows per batch (default); append: final windows "
        "only; complete: every window every batch",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = session("order-events", args.master)
    query = run(
        spark,
        endpoints=args.endpoints,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        checkpoint=args.checkpoint,
        starting_offsets=args.starting_offsets,
        output_mode=args.output_mode,
        trigger_seconds=args.trigger_seconds,
        max_messages_per_trigger=args.max_messages_per_trigger,
    )
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(int(p["numInputRows"]) for p in batches)
    skipped = skipped_rows(query)
    print(
        f"order-events: {rows} input messages in {len(batches)} micro-batches; "
        f"{skipped} could not be used (not order JSON with event_time and status)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
