"""archive: a topic → Parquet files partitioned by store date, exactly once.

A streaming query from ``format("rocketmq")`` to Spark's file sink. The file sink is
exactly once: it lists the files of each micro-batch in ``OUTPUT/_spark_metadata`` and
readers of ``OUTPUT`` (``spark.read.parquet``) see only committed batches, while the
checkpoint holds the source offsets. Running the job again with the same ``--output``
and ``--checkpoint`` continues after the last committed batch: no message is written
twice and none is skipped. Columns: topic, queueId, queueOffset, messageId, tag, keys,
body (binary), properties, bornTimestamp, storeTimestamp, and ``date`` (UTC store date,
the partition column, ``date=2026-11-22``).

Input schema: none — any message is archived as it is (its body as bytes); no row is
skipped.

Run::

    python -m spark_jobs.archive --endpoints 127.0.0.1:8081 --topic orders \\
        --output /data/orders-archive --checkpoint /data/ckpt/orders-archive
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from spark_jobs.args import add_streaming, job_parser
from spark_jobs.common import finish, session

COLUMNS = (
    "topic",
    "queueId",
    "queueOffset",
    "messageId",
    "tag",
    "keys",
    "body",
    "properties",
    "bornTimestamp",
    "storeTimestamp",
)


def archive_rows(messages: DataFrame) -> DataFrame:
    """Source rows → archive rows (:data:`COLUMNS` plus the ``date`` partition column)."""
    return messages.select(*COLUMNS, F.to_date("storeTimestamp").alias("date"))


def run(
    spark: SparkSession,
    *,
    endpoints: str,
    topic: str,
    output: str,
    checkpoint: str,
    starting_offsets: str = "earliest",
    trigger_seconds: int | None = None,
    max_messages_per_trigger: int | None = None,
) -> StreamingQuery:
    """Run the archive query (availableNow: to the end of the topic); returns it when done.

    Raises the query's exception if it failed.
    """
    reader = (
        spark.readStream.format("rocketmq")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_messages_per_trigger is not None:
        reader = reader.option("maxMessagesPerTrigger", str(max_messages_per_trigger))
    writer = (
        archive_rows(reader.load())
        .writeStream.format("parquet")
        .partitionBy("date")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .queryName("archive")
    )
    if trigger_seconds is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    return finish(query)


def parser() -> argparse.ArgumentParser:
    p = job_parser("archive", __doc__)
    p.add_argument("--topic", required=True, help="topic to archive")
    p.add_argument("--output", required=True, help="Parquet output directory")
    add_streaming(
        p, max_messages_help="at most N messages per micro-batch (and so per set of files)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = session("archive", args.master)
    query = run(
        spark,
        endpoints=args.endpoints,
        topic=args.topic,
        output=args.output,
        checkpoint=args.checkpoint,
        starting_offsets=args.starting_offsets,
        trigger_seconds=args.trigger_seconds,
        max_messages_per_trigger=args.max_messages_per_trigger,
    )
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    print(f"archive: {rows} messages of '{args.topic}' written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
