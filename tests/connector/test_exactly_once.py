"""Exactly-once: the commit protocol against a real broker, then the proof through Spark.

The protocol tests drive ``connector.exactly_once`` directly with half messages they
prepare themselves, placing the "crash" exactly where they want it. The Spark tests fail
a task mid-batch and SIGKILL a driver mid-batch (a query run in a subprocess), restart
from the checkpoint, wait until the broker has resolved every half message, and then
count exactly one copy of every row in the topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from broker_core.client import OutgoingMessage, ReceivedMessage, RocketMQClient
from connector import exactly_once as eo
from connector.exactly_once import TaskHalves
from connector.transactions import EndOutcome, HalfRef, end, prepare
from tests.connector.conftest import await_query
from tests.server.conftest import BrokerProcess, start_broker

ROOT = Path(__file__).resolve().parents[2]
# transactionTimeoutMs of the Spark tests: a batch may take 10 s (half of it) on a loaded
# machine before its commit refuses it; orphaned halves are gone ~21 s after they were sent.
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Orphaned halves are checked once, 1 s after their recovery time, then rolled back."""
    proc = start_broker(
        tmp_path_factory.mktemp("eo-broker"),
        config={
            "broker": {
                "transaction_check_timeout_ms": 1_000,
                "transaction_max_checks": 1,
                "transaction_check_interval_ms": 100,
            }
        },
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint) as c:
        yield c


def read_queue(client: RocketMQClient, topic: str, queue_id: int) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    offset = client.query_offset(topic, queue_id, "BEGINNING")
    end_offset = client.query_offset(topic, queue_id, "END")
    while offset < end_offset:
        batch = client.pull("eo-tests", topic, queue_id, offset, min(1024, end_offset - offset))
        out.extend(batch.messages)
        offset = batch.next_offset
    return out


def read_topic(client: RocketMQClient, topic: str) -> list[ReceivedMessage]:
    return [m for q in client.topic_status(topic) for m in read_queue(client, topic, q["queue_id"])]


def bodies(client: RocketMQClient, topic: str) -> Counter[str]:
    return Counter(m.body.decode() for m in read_topic(client, topic))


def live_halves(client: RocketMQClient) -> int:
    """Half records no op record has finished yet (prepared, not committed/rolled back)."""
    halves = {m.queue_offset for m in read_queue(client, TRANS_HALF_TOPIC, 0)}
    finished = {
        int(part)
        for m in read_queue(client, TRANS_OP_HALF_TOPIC, 0)
        for part in m.body.decode().split(",")
    }
    return len(halves - finished)


def half_records(client: RocketMQClient) -> int:
    return client.query_offset(TRANS_HALF_TOPIC, 0, "END")


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll broker-side state (there is no push notification for it) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- the protocol


def attempt(
    client: RocketMQClient, topic: str, rows: list[list[str]], batch_id: int = 0
) -> list[TaskHalves]:
    """One attempt of a batch: partition p sends ``rows[p]`` as halves and reports them."""
    now_ms = time.time_ns() // 1_000_000
    reports = []
    for partition, partition_rows in enumerate(rows):
        halves = (
            prepare(
                client,
                topic,
                [OutgoingMessage(r.encode()) for r in partition_rows],
                recovery_ms=60_000,
            )
            if partition_rows
            else []
        )
        reports.append(
            TaskHalves(partition, 0, len(partition_rows), "query-1", batch_id, now_ms, halves)
        )
    return reports


def commit(
    client: RocketMQClient, reports: list[TaskHalves], batch_id: int = 0, sink: str = "sink"
) -> None:
    eo.commit_stream_batch(client, list(reports), batch_id, producer_group=sink, timeout_ms=60_000)


ROWS = [[f"p0-{i}" for i in range(6)], [f"p1-{i}" for i in range(5)], []]
EXPECTED = Counter(row for rows in ROWS for row in rows)


def halves_of(reports: list[TaskHalves]) -> list[HalfRef]:
    return [h for r in reports for h in r.halves]


def test_commit_makes_every_row_visible_once_and_a_replay_adds_nothing(
    client: RocketMQClient,
) -> None:
    topic = "eo-commit"
    client.create_topic(topic, queues=3)
    first = attempt(client, topic, ROWS)
    assert bodies(client, topic) == Counter()  # halves are invisible
    commit(client, first, sink="s-commit")
    wait_for(lambda: bodies(client, topic) == EXPECTED, 10, "the committed rows")
    commit(client, first, sink="s-commit")  # the same commit again: nothing changes
    replay = attempt(client, topic, ROWS)  # Spark re-runs the batch after a driver crash
    commit(client, replay, sink="s-commit")
    assert all(
        end(client, h, commit=True) is EndOutcome.ALREADY_ROLLED_BACK for h in halves_of(replay)
    )
    assert bodies(client, topic) == EXPECTED


def test_a_decided_batch_is_finished_by_the_replay(client: RocketMQClient) -> None:
    """The driver died after writing the intent and committing only some halves."""
    topic = "eo-decided"
    client.create_topic(topic, queues=2)
    first = attempt(client, topic, ROWS)
    marker = eo.marker_topic("s-decided")
    eo.ensure_marker_topic(client, marker)
    eo.write_intent(client, marker, 0, eo.slots_of(first))
    for half in halves_of(first)[:4]:
        end(client, half, commit=True)
    replay = attempt(client, topic, ROWS)
    wait_for(lambda: eo.find_intent(client, marker, 0) is not None, 10, "the intent")
    commit(client, replay, sink="s-decided")
    wait_for(lambda: bodies(client, topic) == EXPECTED, 10, "the decided rows")
    ids = {m.message_id for m in read_topic(client, topic)}
    assert ids == {h.message_id for h in halves_of(first)}  # the decided attempt's messages


def test_halves_lost_after_the_decision_are_replaced_by_the_replayed_copies(
    client: RocketMQClient,
) -> None:
    topic = "eo-lost"
    client.create_topic(topic, queues=2)
    first = attempt(client, topic, ROWS)
    marker = eo.marker_topic("s-lost")
    eo.ensure_marker_topic(client, marker)
    eo.write_intent(client, marker, 0, eo.slots_of(first))
    lost = [first[0].halves[2], first[1].halves[4]]
    for half in lost:  # as the broker's check-back does when nobody commits in time
        assert end(client, half, commit=False) is EndOutcome.ENDED
    replay = attempt(client, topic, ROWS)
    wait_for(lambda: eo.find_intent(client, marker, 0) is not None, 10, "the intent")
    commit(client, replay, sink="s-lost")
    wait_for(lambda: bodies(client, topic) == EXPECTED, 10, "every row once")
    again = attempt(client, topic, ROWS)  # and yet another replay changes nothing
    wait_for(lambda: eo.find_intent(client, marker, 0).done, 10, "the done record")  # type: ignore[union-attr]
    commit(client, again, sink="s-lost")
    assert bodies(client, topic) == EXPECTED


def test_a_lost_half_without_an_identical_replay_is_an_error(client: RocketMQClient) -> None:
    topic = "eo-lost-differs"
    client.create_topic(topic, queues=1)
    first = attempt(client, topic, [["a", "b"]])
    marker = eo.marker_topic("s-differs")
    eo.ensure_marker_topic(client, marker)
    eo.write_intent(client, marker, 0, eo.slots_of(first))
    end(client, first[0].halves[1], commit=False)
    replay = attempt(client, topic, [["a", "not-b"]])  # a non-deterministic replay
    wait_for(lambda: eo.find_intent(client, marker, 0) is not None, 10, "the intent")
    with pytest.raises(eo.TransactionLostError, match="partition/row"):
        commit(client, replay, sink="s-differs")
    assert bodies(client, topic) == Counter({"a": 1})  # never the wrong row


def test_abort_rolls_back_undecided_halves_and_keeps_decided_ones(
    client: RocketMQClient,
) -> None:
    topic = "eo-abort"
    client.create_topic(topic, queues=1)
    undecided = attempt(client, topic, [["u1", "u2"]], batch_id=1)
    eo.abort_stream_batch(client, list(undecided), 1, producer_group="s-abort")
    assert all(
        end(client, h, commit=True) is EndOutcome.ALREADY_ROLLED_BACK for h in halves_of(undecided)
    )
    decided = attempt(client, topic, [["d1", "d2"]], batch_id=2)
    marker = eo.marker_topic("s-abort")
    eo.ensure_marker_topic(client, marker)
    eo.write_intent(client, marker, 2, eo.slots_of(decided))
    wait_for(lambda: eo.find_intent(client, marker, 2) is not None, 10, "the intent")
    eo.abort_stream_batch(client, list(decided), 2, producer_group="s-abort")
    commit(client, attempt(client, topic, [["d1", "d2"]], batch_id=2), 2, sink="s-abort")
    wait_for(lambda: bodies(client, topic) == Counter({"d1": 1, "d2": 1}), 10, "decided rows")


def test_halves_too_old_to_commit_safely_roll_the_batch_back(client: RocketMQClient) -> None:
    topic = "eo-old"
    client.create_topic(topic, queues=1)
    reports = attempt(client, topic, [["x", "y"]])
    reports[0].first_send_ms -= 40_000  # sent 40 s ago; the timeout is 60 s
    with pytest.raises(eo.TransactionTimeoutError, match="transactionTimeoutMs"):
        commit(client, reports, sink="s-old")
    assert all(
        end(client, h, commit=True) is EndOutcome.ALREADY_ROLLED_BACK for h in halves_of(reports)
    )
    assert bodies(client, topic) == Counter()


# --------------------------------------------------------------------------- through Spark


def write_inputs(directory: Path, files: dict[str, list[str]]) -> list[str]:
    """One JSON-lines file per entry; returns every row's body."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        (directory / f"{name}.json").write_text(
            "".join(json.dumps({"body": r}) + "\n" for r in rows)
        )
    return [r for rows in files.values() for r in rows]


def test_a_batch_write_with_exactly_once_is_all_or_nothing(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient
) -> None:
    topic = "eo-batch-job"
    client.create_topic(topic, queues=2)
    options = {
        "endpoints": broker.endpoint,
        "topic": topic,
        "exactlyOnce": "true",
        "batchSize": "10",
        "transactionTimeoutMs": str(TIMEOUT_MS),
    }
    good = [f"ok-{i}" for i in range(40)]
    spark.createDataFrame([(b,) for b in good], "body string").write.format("rocketmq").options(
        **options
    ).mode("append").save()
    wait_for(lambda: bodies(client, topic) == Counter(good), 10, "the committed rows")

    before = half_records(client)
    rows = [(f"bad-{i}",) for i in range(30)] + [(None,)]  # the null body fails the task
    failing = spark.createDataFrame(rows, "body string").coalesce(1)
    with pytest.raises(Exception, match="'body' is null"):
        failing.write.format("rocketmq").options(**options).mode("append").save()
    assert half_records(client) - before == 30  # three requests of halves were sent …
    assert bodies(client, topic) == Counter(good)  # … and none of them became visible
    wait_for(lambda: live_halves(client) == 0, 60, "the failed task to roll its halves back")
    assert bodies(client, topic) == Counter(good)


def test_a_task_failing_mid_batch_leaves_no_trace(
    spark: SparkSession, broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = "eo-task-failure"
    client.create_topic(topic, queues=2)
    rows = write_inputs(
        tmp_path / "in",
        {
            "a": [f"a-{i:03d}" for i in range(120)],
            "b": [f"b-{i:03d}" for i in range(300)]
            + ["MARKER"]
            + [f"c-{i:03d}" for i in range(50)],
        },
    )
    flag, endpoint, half_topic = str(tmp_path / "failed-once"), broker.endpoint, TRANS_HALF_TOPIC
    before = half_records(client)

    @F.udf("string")
    def fail_once(body):  # no type hints: Spark would read them as a pandas UDF's
        if body == "MARKER" and not os.path.exists(flag):
            open(flag, "w").close()
            # Fail only once file b's task has sent halves too (file a has 120 rows).
            with RocketMQClient(endpoint) as probe:
                deadline = time.monotonic() + 60
                while (
                    probe.query_offset(half_topic, 0, "END") - before < 200
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.05)
            raise RuntimeError("injected task failure")
        return body

    def run() -> None:
        stream = spark.readStream.schema("body string").json(str(tmp_path / "in"))
        query = (
            stream.select(fail_once("body").alias("body"))
            .writeStream.format("rocketmq")
            .option("endpoints", broker.endpoint)
            .option("topic", topic)
            .option("exactlyOnce", "true")
            .option("batchSize", "10")
            .option("transactionTimeoutMs", str(TIMEOUT_MS))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        await_query(query, 180)  # raises StreamingQueryException if the query failed

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        with pytest.raises(StreamingQueryException, match="injected task failure"):
            run()
        sent_by_failed_run = half_records(client) - before
        assert bodies(client, topic) == Counter()  # nothing of the failed batch is visible
        run()  # restart from the checkpoint: the batch is replayed and committed
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert sent_by_failed_run >= 200
    wait_for(lambda: live_halves(client) == 0, 60, "the broker to resolve every half")
    wait_for(lambda: bodies(client, topic) == Counter(rows), 10, "every row once")
    assert bodies(client, topic) == Counter(rows)


DRIVER = textwrap.dedent('''
    """A streaming query with exactlyOnce=true; with a flag path, its tasks hang after
    sending their halves (so the test can SIGKILL the driver before the commit)."""
    import os, sys, time

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource

    from connector.sink import RocketMQStreamWriter, make_stream_writer

    endpoint, topic, inputs, checkpoint, flag = sys.argv[1:6]

    class HangAfterSending(RocketMQStreamWriter):
        def write(self, iterator):
            report = super().write(iterator)
            if flag != "-":
                with open(f"{flag}.{os.getpid()}", "w") as out:
                    out.write(str(len(report.halves)))
                time.sleep(600)  # the driver is killed meanwhile
            return report

    class HangingSink(DataSource):
        @classmethod
        def name(cls):
            return "rocketmq_hanging"

        def streamWriter(self, schema, overwrite):
            plain = make_stream_writer(self.options, schema, overwrite)
            return HangAfterSending(plain.options, plain.plan)

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.dataSource.register(HangingSink)
    query = (spark.readStream.schema("body string").json(inputs).writeStream
             .format("rocketmq_hanging").option("endpoints", endpoint).option("topic", topic)
             .option("exactlyOnce", "true").option("transactionTimeoutMs", sys.argv[6])
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("DONE", [p["numInputRows"] for p in query.recentProgress])
''')


def run_driver(tmp_path: Path, endpoint: str, topic: str, flag: str) -> subprocess.Popen[str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.Popen(
        [
            sys.executable,
            str(script),
            endpoint,
            topic,
            str(tmp_path / "in"),
            str(tmp_path / "cp"),
            flag,
            str(TIMEOUT_MS),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_a_driver_killed_mid_batch_delivers_every_row_once_after_restart(
    broker: BrokerProcess, client: RocketMQClient, tmp_path: Path
) -> None:
    topic = "eo-driver-kill"
    client.create_topic(topic, queues=2)
    rows = write_inputs(
        tmp_path / "in",
        {"a": [f"a-{i:03d}" for i in range(150)], "b": [f"b-{i:03d}" for i in range(170)]},
    )
    flag = tmp_path / "halves-sent"
    before = half_records(client)
    driver = run_driver(tmp_path, broker.endpoint, topic, str(flag))
    try:
        wait_for(
            lambda: any(tmp_path.glob("halves-sent.*")) or driver.poll() is not None,
            120,
            "a task to send its halves",
        )
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        driver.communicate()
    assert half_records(client) > before  # halves were sent …
    assert bodies(client, topic) == Counter()  # … and none is visible

    restarted = run_driver(tmp_path, broker.endpoint, topic, "-")
    output, _ = restarted.communicate(timeout=180)
    assert restarted.returncode == 0, output[-3000:]
    assert "DONE [320]" in output  # batch 0 replayed whole from the checkpoint
    wait_for(lambda: live_halves(client) == 0, 60, "the broker to roll back orphaned halves")
    wait_for(lambda: bodies(client, topic) == Counter(rows), 10, "every row once")
    assert bodies(client, topic) == Counter(rows)
