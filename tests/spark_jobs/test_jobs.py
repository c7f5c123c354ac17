"""The spark_jobs pipelines on tiny data: a real broker process (one for the module) and
the session SparkSession of the connector tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_core.client import OutgoingMessage, RocketMQClient
from spark_jobs import archive, dlq_replay, order_events
from tests.connector.conftest import BrokerProcess, new_topic

ROOT = Path(__file__).resolve().parents[2]


def event(i: int, status: str, cents: int, at: str) -> bytes:
    return json.dumps(
        {
            "order_id": f"o-{i}",
            "customer": f"c-{i % 3}",
            "amount_cents": cents,
            "status": status,
            "event_time": at,
        }
    ).encode()


EVENTS = [  # (status, cents, event time): windows 10:00 and 10:01
    ("PAID", 1000, "2026-11-22T10:00:05Z"),
    ("PAID", 250, "2026-11-22T10:00:59.999Z"),
    ("CREATED", 700, "2026-11-22T10:00:30Z"),
    ("PAID", 4000, "2026-11-22T10:01:00Z"),
    ("CREATED", 1, "2026-11-22T10:01:10Z"),
    ("CREATED", 2, "2026-11-22T10:01:20Z"),
]
EXPECTED = {  # (window start, status) -> (orders, revenue_cents)
    ("2026-11-22T10:00:00.000Z", "PAID"): (2, 1250),
    ("2026-11-22T10:00:00.000Z", "CREATED"): (1, 700),
    ("2026-11-22T10:01:00.000Z", "PAID"): (1, 4000),
    ("2026-11-22T10:01:00.000Z", "CREATED"): (2, 3),
}


def results(client: RocketMQClient, topic: str) -> list[dict[str, object]]:
    out = []
    for q in client.query_route(topic):
        batch = client.pull("inspector", topic, q.queue_id, 0, 1000)
        out += [json.loads(m.body) | {"_tag": m.tag, "_keys": list(m.keys)} for m in batch.messages]
    return out


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_order_events_aggregates(
    spark: SparkSession,
    client: RocketMQClient,
    broker: BrokerProcess,
    tmp_path: Path,
    mode: str,
) -> None:
    source, sink = new_topic(client, "orders"), new_topic(client, "stats")
    bad = [b"not json", b'{"status": "X"}', b'{"id": 1}']  # the last: the README's sample
    bodies = [event(i, *e) for i, e in enumerate(EVENTS)] + bad
    client.send_batch(source, [OutgoingMessage(b) for b in bodies])
    query = order_events.run(
        spark,
        endpoints=broker.endpoint,
        input_topic=source,
        output_topic=sink,
        checkpoint=str(tmp_path / "ckpt"),
        output_mode=mode,
    )
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [9]
    assert order_events.skipped_rows(query) == 3  # counted, and reported by main()
    got = {
        (r["window_start"], r["status"]): (r["orders"], r["revenue_cents"])
        for r in results(client, sink)
    }
    assert got == EXPECTED
    sample = next(r for r in results(client, sink) if r["status"] == "PAID")
    assert sample["_tag"] == "PAID" and sample["_keys"] == [f"PAID@{sample['window_start']}"]


def test_order_events_restart_continues_from_checkpoint(
    spark: SparkSession,
    client: RocketMQClient,
    broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    source, sink = new_topic(client, "orders"), new_topic(client, "stats")
    kwargs = dict(
        endpoints=broker.endpoint,
        input_topic=source,
        output_topic=sink,
        checkpoint=str(tmp_path / "ckpt"),
    )
    client.send_batch(source, [event(i, *e) for i, e in enumerate(EVENTS[:3])])
    order_events.run(spark, **kwargs)
    client.send_batch(source, [event(i, *e) for i, e in enumerate(EVENTS[3:], 3)])
    second = order_events.run(spark, **kwargs)
    assert sum(p["numInputRows"] for p in second.recentProgress) == 3
    newest: dict[tuple[object, object], dict[str, object]] = {}
    for r in sorted(results(client, sink), key=lambda r: str(r["emitted_at"])):
        newest[(r["window_start"], r["status"])] = r
    assert {k: (r["orders"], r["revenue_cents"]) for k, r in newest.items()} == EXPECTED


def test_archive_is_exactly_once_across_runs(
    spark: SparkSession,
    client: RocketMQClient,
    broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    topic = new_topic(client, "arch")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    kwargs = dict(
        endpoints=broker.endpoint,
        topic=topic,
        output=str(out),
        checkpoint=str(ckpt),
        max_messages_per_trigger=4,
    )
    client.send_batch(topic, [f"a-{i}".encode() for i in range(10)])
    archive.run(spark, **kwargs)
    archive.run(spark, **kwargs)  # nothing new: writes nothing
    client.send_batch(topic, [f"b-{i}".encode() for i in range(5)])
    archive.run(spark, **kwargs)
    rows = spark.read.parquet(str(out)).collect()
    bodies = sorted(bytes(r["body"]).decode() for r in rows)
    assert bodies == sorted([f"a-{i}" for i in range(10)] + [f"b-{i}" for i in range(5)])
    assert len({(r["queueId"], r["queueOffset"]) for r in rows}) == 15
    assert {r["date"] for r in rows} == {rows[0]["storeTimestamp"].date()}
    assert any(p.name.startswith("date=") for p in out.iterdir())


@pytest.mark.parametrize("module", ["order_events", "archive"])
def test_help(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"spark_jobs.{module}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "--endpoints" in done.stdout


@pytest.mark.parametrize(
    ("job", "own"),
    [
        (archive, ["--topic", "t", "--output", "/o", "--checkpoint", "/c"]),
        (order_events, ["--input-topic", "a", "--output-topic", "b", "--checkpoint", "/c"]),
        (dlq_replay, ["--group", "g"]),
    ],
)
def test_every_job_takes_the_shared_options(job: Any, own: list[str]) -> None:
    args = job.parser().parse_args(["--endpoints", "h:8081", *own])
    assert (args.endpoints, args.master, args.starting_offsets) == ("h:8081", None, "earliest")
    if job is not dlq_replay:
        assert (args.trigger_seconds, args.max_messages_per_trigger) == (None, None)
        more = job.parser().parse_args(["--endpoints", "h", *own, "--trigger-seconds", "5"])
        assert more.trigger_seconds == 5
    with pytest.raises(SystemExit):
        job.parser().parse_args(own)  # --endpoints is required


def test_help_as_a_file() -> None:
    """spark-submit runs the file itself: the repository must still be importable."""
    script = str(ROOT / "spark_jobs" / "order_events.py")
    done = subprocess.run(
        [sys.executable, script, "--help"], cwd="/", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_bad_argument_names_the_option() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_jobs.order_events",
            "--endpoints",
            "x",
            "--input-topic",
            "a",
            "--output-topic",
            "b",
            "--checkpoint",
            "c",
            "--trigger-seconds",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--trigger-seconds" in done.stderr
