"""dlq-replay: dead letters of a consumer group → back to the topics they came from.

Reads ``%DLQ%{group}`` as a batch (``format("rocketmq")``, earliest → latest), drops the
messages that cannot be fixed by replaying them — a body that is not valid JSON, a tag
equal to ``--drop-tag`` (repeatable), or no known original topic — and sends the rest,
with their body, tag, keys, user properties and message group, to their original topic
with ``df.write.format("rocketmq")`` (a ``topic`` column per row).

The original topic: a dead-lettered copy stores it in its ``RETRY_TOPIC`` property
(``broker_core.broker.pop.policy.revive_copy``); the broker hands it out as the message's
``dead_letter_queue.topic`` system property, not as a user property. The job takes it from
the ``properties`` column when present (``RETRY_TOPIC``, ``DLQ_ORIGIN_TOPIC``,
``REAL_TOPIC``), else looks it up on the driver with one raw PullMessage pass over the DLQ
queues (:func:`origin_topics`).

Input schema: any JSON value as the body (the job checks only that it parses), plus the
message's original topic as above; the dropped messages are counted and listed by reason.

Not idempotent: the DLQ is not consumed, so running the job twice replays twice. Use
``--dry-run`` first (prints what would be sent and dropped; sends nothing), ``--limit N``
to replay the N oldest dead letters, and ``--starting-offsets`` (the JSON the job prints
after a replay) to skip those already replayed.

Run::

    python -m spark_jobs.dlq_replay --endpoints 127.0.0.1:8081 --group billing --dry-run
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import RocketMQClient
from broker_core.errors import TopicNotFoundError
from broker_core.protocol.group_topics import dlq_topic
from broker_core.protocol.properties import SYSTEM_PROPERTY_KEYS
from spark_jobs.args import job_parser, positive_int
from spark_jobs.common import session

ORIGIN_KEYS = ("RETRY_TOPIC", "DLQ_ORIGIN_TOPIC", "REAL_TOPIC")
PULL_GROUP = "dlq-replay"


@dataclass(frozen=True)
class Replay:
    """What a run did (or, with ``dry_run``, would do)."""

    sent: dict[str, int]  # original topic -> messages sent back
    dropped: dict[str, int]  # reason -> messages dropped
    next_offsets: dict[str, dict[str, int]]  # startingOffsets JSON that skips this run's
    dry_run: bool


def origin_topics(endpoints: str, topic: str) -> dict[tuple[int, int], str]:
    """``(queueId, queueOffset) -> original topic`` of every dead letter in ``topic``.

    Pulls each queue once from its first to its last offset with the raw gRPC stub, as the
    client drops system properties (``dead_letter_queue.topic``). Read-only.
    """
    found: dict[tuple[int, int], str] = {}
    with RocketMQClient(endpoints) as client:
        queues = client.query_route(topic)
        ranges = [
            (
                q,
                client.query_offset(topic, q.queue_id, "BEGINNING"),
                client.query_offset(topic, q.queue_id, "END"),
            )
            for q in queues
        ]
    for queue, low, high in ranges:
        with grpc.insecure_channel(queue.endpoint or endpoints.split(",")[0]) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            offset = low
            while offset < high:
                request = service_pb2.PullMessageRequest(
                    group=pb.Resource(name=PULL_GROUP),
                    offset=offset,
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue.queue_id),
                    batch_size=min(256, high - offset),
                )
                next_offset = offset
                for response in stub.PullMessage(request, timeout=30):
                    kind = response.WhichOneof("content")
                    if kind == "message":
                        sp = response.message.system_properties
                        if sp.HasField("dead_letter_queue"):
                            found[(queue.queue_id, sp.queue_offset)] = sp.dead_letter_queue.topic
                    elif kind == "next_offset":
                        next_offset = response.next_offset
                if next_offset <= offset:
                    break
                offset = next_offset
    return found


def _is_json(body: bytes | None) -> bool:
    if body is None:
        return False
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def classify(letters: DataFrame, origins: DataFrame, drop_tags: Sequence[str]) -> DataFrame:
    """Dead letters + ``origins`` (queueId, queueOffset, origin) → rows with ``origin`` and
    ``drop`` (null to send, else the reason: ``tag``, ``json`` or ``no-topic``)."""
    is_json = F.udf(lambda body: _is_json(body), BooleanType())  # a plain (pickled) UDF
    from_props = F.coalesce(*[F.col("properties").getItem(k) for k in ORIGIN_KEYS])
    rows = letters.join(origins, ["queueId", "queueOffset"], "left").withColumn(
        "origin", F.coalesce(from_props, F.col("lookedUp"))
    )
    drop: Column = (
        F.when(F.col("tag").isin(list(drop_tags)), F.lit("tag"))
        .when(~is_json("body"), F.lit("json"))
        .when(F.col("origin").isNull(), F.lit("no-topic"))
    )
    return rows.withColumn("drop", drop)


def outgoing(kept: DataFrame) -> DataFrame:
    """Rows to send: the original topic and the message minus broker-owned properties."""
    system = F.array(*[F.lit(k) for k in sorted(SYSTEM_PROPERTY_KEYS)])
    props = F.map_filter(
        F.coalesce("properties", F.create_map().cast("map<string,string>")),
        lambda k, _: ~F.array_contains(system, k),
    )
    return kept.select(
        F.col("origin").alias("topic"),
        "body",
        "tag",
        "keys",
        props.alias("properties"),
        "messageGroup",
    )


def run(
    spark: SparkSession,
    *,
    endpoints: str,
    group: str,
    drop_tags: Sequence[str] = (),
    dry_run: bool = False,
    limit: int | None = None,
    starting_offsets: str = "earliest",
) -> Replay:
    """Replay ``%DLQ%{group}`` (see the module docstring); returns what was sent/dropped."""
    topic = dlq_topic(group)
    try:
        pairs = [(q, o, t) for (q, o), t in origin_topics(endpoints, topic).items()]
    except TopicNotFoundError:  # nothing was ever dead-lettered for the group
        return Replay({}, {}, {}, dry_run)
    letters = (
        spark.read.format("rocketmq")
        .option("endpoints", endpoints)
        .option("topic", topic)
        .option("startingOffsets", starting_offsets)
        .option("endingOffsets", "latest")
        .load()
    )
    if limit is not None:
        letters = letters.orderBy("storeTimestamp", "queueId", "queueOffset").limit(limit)
    origins = spark.createDataFrame(pairs, "queueId int, queueOffset long, lookedUp string")
    rows = classify(letters, origins, drop_tags).cache()
    try:
        counts = rows.groupBy("drop", "origin").count().collect()
        ends = rows.groupBy("broker", "queueId").agg(F.max("queueOffset").alias("last")).collect()
        if not dry_run:
            (
                outgoing(rows.where(F.col("drop").isNull()))
                .write.format("rocketmq")
                .option("endpoints", endpoints)
                .mode("append")
                .save()
            )
    finally:
        rows.unpersist()
    sent: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for r in counts:
        if r["drop"] is None:
            sent[r["origin"]] = sent.get(r["origin"], 0) + r["count"]
        else:
            dropped[r["drop"]] = dropped.get(r["drop"], 0) + r["count"]
    nxt = {topic: {f"{r['broker']}:{r['queueId']}": int(r["last"]) + 1 for r in ends}}
    return Replay(sent, dropped, nxt, dry_run)


def parser() -> argparse.ArgumentParser:
    p = job_parser("dlq_replay", __doc__)
    p.add_argument("--group", required=True, help="consumer group whose %%DLQ%% topic to replay")
    p.add_argument(
        "--drop-tag",
        action="append",
        default=[],
        metavar="TAG",
        help="drop dead letters with this tag (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be done; send nothing")
    p.add_argument(
        "--limit", type=positive_int, default=None, help="replay at most the N oldest dead letters"
    )
    p.add_argument(
        "--starting-offsets",
        default="earliest",
        help="earliest or JSON offsets of the DLQ topic (skip earlier replays)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = session("dlq-replay", args.master)
    done = run(
        spark,
        endpoints=args.endpoints,
        group=args.group,
        drop_tags=args.drop_tag,
        dry_run=args.dry_run,
        limit=args.limit,
        starting_offsets=args.starting_offsets,
    )
    verb = "would send" if done.dry_run else "sent"
    for target, n in sorted(done.sent.items()):
        print(f"dlq-replay: {verb} {n} message(s) back to '{target}'")
    for reason, n in sorted(done.dropped.items()):
        print(f"dlq-replay: dropped {n} message(s): {reason}")
    if not done.sent and not done.dropped:
        print(f"dlq-replay: {dlq_topic(args.group)} is empty")
    elif not done.dry_run:
        print(f"next run: --starting-offsets '{json.dumps(done.next_offsets)}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
