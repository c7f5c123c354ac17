"""SIGKILL the broker with transactions in flight; every acknowledged commit survives,
commits go on after each restart, and the exactly-once sink still delivers every row once.

Issue 13, item 2: after a restart the transaction ledger used to fail an assertion, so
every EndTransaction answered INTERNAL_ERROR and an exactly-once Spark query could never
commit again. Two workloads, each against a broker killed at random moments and
restarted on the same port and store:

* the official transactional ``Producer``: begin, send a half, commit, in a loop; a
  body counts as acknowledged only once ``commit()`` returned. Its checker answers
  COMMIT, so halves whose commit was lost to a kill are committed by check-back (stored
  but unacknowledged: allowed). At the end every half is resolved, every acknowledged
  body is stored under its message id, and commits were acknowledged after the last
  restart. A body stored twice needs a kill to tear an [real message, op record] batch
  between its two records, so duplicates are bounded by the number of kills.
* a Spark stream ``eo-src`` → ``eo-dst`` with ``exactlyOnce=true`` and
  ``maxMessagesPerTrigger``: a query that fails because the broker was down under it
  (the error says so, and a kill overlapped the attempt) is restarted from its
  checkpoint, as an operator would — at most once per kill; any other failure fails the
  test. At the end ``eo-dst`` holds every source row exactly once.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

from broker_core.client import OutgoingMessage, RocketMQClient
from tests.chaos.load import AckLog, ChaosBroker, KillPlan, audit, kill_cycles, read_back
from tests.connector.test_exactly_once import bodies, live_halves, wait_for
from tests.send_loop import LoopThreads

SEED = 20_261_123
RETRY_PAUSE_S = 0.05
RESOLVE_TIMEOUT_S = 90.0


SHORT = KillPlan(kills=2, min_acks=20, max_acks=60, ack_timeout_s=90)
FULL = KillPlan(kills=10, min_acks=50, max_acks=400, ack_timeout_s=90)


class CommitAll(TransactionChecker):
    """The producer meant to commit everything it sent."""

    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.COMMIT


def transactional_producer(endpoint: str, topic: str, acks: AckLog) -> LoopThreads:
    """One thread: begin → send half → commit, recording commits that returned OK (a
    failure — broker down, or killed mid-transaction — is counted and retried)."""

    def run(stop: threading.Event) -> None:
        producer = Producer(ClientConfiguration(endpoint, Credentials()), [topic], CommitAll())
        producer.startup()

        def commit_one(body: bytes) -> str:
            msg = Message()
            msg.topic, msg.body = topic, body
            transaction = producer.begin_transaction()
            receipt = producer.send(msg, transaction)
            transaction.commit()
            return str(receipt.message_id)

        try:
            acks.send_until(stop, b"T", commit_one, RETRY_PAUSE_S)
        finally:
            producer.shutdown()

    threads = LoopThreads([("tx-producer", lambda: run(threads.stop))])
    return threads


@pytest.mark.parametrize(
    ("flush", "plan"),
    [
        pytest.param("sync", SHORT, id="sync-short"),
        pytest.param("sync", FULL, id="sync-full", marks=pytest.mark.slow),
        pytest.param("async", FULL, id="async-full", marks=pytest.mark.slow),
    ],
)
def test_official_transactions_survive_sigkill(
    tmp_path: Path, flush: str, plan: KillPlan, chaos_figures
) -> None:
    topic = "chaos-tx"
    broker = ChaosBroker(tmp_path, flush=flush)
    broker.start()
    acks = AckLog()
    producer = transactional_producer(broker.endpoint, topic, acks)
    started_s = time.monotonic()
    try:
        with RocketMQClient(broker.endpoint) as admin:
            admin.create_topic(topic, queues=2, message_type="TRANSACTION")
        producer.start()
        kill_cycles(broker, plan, acks, SEED)
        after_last_restart = acks.count()
        assert acks.wait_for_count(after_last_restart + plan.min_acks, plan.ack_timeout_s), (
            "no commit was acknowledged after the last restart\n" + broker.log_tail()
        )
        producer.join()
        with RocketMQClient(broker.endpoint, timeout_s=30) as reader:
            wait_for(
                lambda: live_halves(reader) == 0,
                RESOLVE_TIMEOUT_S,
                "the broker to resolve every half",
            )
            stored = read_back(reader, topic)
            health = reader.health()["services"]
    except BaseException:
        producer.stop.set()
        broker.kill()
        raise
    assert broker.stop() == 0, broker.log_tail()
    result = audit(acks.snapshot(), stored)
    chaos_figures(
        f"kill-with-transactions flush={flush}",
        kills=plan.kills,
        acknowledged_commits=result.acknowledged,
        stored=result.stored,
        lost=len(result.lost),
        duplicates=result.duplicates,
        committed_by_check_back=result.unacked_stored,
        failed_calls=dict(acks.failed_sends),
        seconds=round(time.monotonic() - started_s, 1),
    )
    assert result.lost == [], f"{len(result.lost)} acknowledged commits lost"
    assert result.duplicates <= plan.kills, f"{result.duplicates} duplicates"
    assert health["transaction-check"] == "ok", health


# ---- the exactly-once sink ------------------------------------------------------------------

SRC, DST = "eo-src", "eo-dst"


# what a query sees while the broker it reads and writes is down (and nothing else)
BROKER_DOWN = (
    "BrokerUnavailableError",  # our client's (seen: "... unreachable ... Connection refused")
    "BrokerNotReachableError",
    "RemotingConnectError",
    "StatusCode.UNAVAILABLE",
    "Connection refused",
    "Connection reset",
)


@dataclass
class Outages:
    """When the killer took the broker down (SIGKILL) and when it was serving again."""

    windows: list[tuple[float, float | None]] = field(default_factory=list)

    def overlaps(self, start: float, end: float) -> bool:
        """Was the broker down (killed, not yet restarted) at some moment in [start, end]?"""
        return any(k <= end and (up is None or up >= start) for k, up in self.windows)

    def all_up(self) -> bool:
        return all(up is not None for _, up in self.windows)


def run_until_done(
    spark: SparkSession, endpoint: str, checkpoint: Path, outages: Outages, attempts: int
) -> int:
    """Run the availableNow query; restart it from the checkpoint only after a failure the
    scenario causes: the broker was down during the attempt and the error says so. Any
    other failure (an INTERNAL_ERROR from a live broker, a bug) fails the test at once."""
    for attempt in range(1, attempts + 1):
        started = time.monotonic()
        query = (
            spark.readStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", SRC)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", 1500)
            .load()
            .selectExpr("body")
            .writeStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", DST)
            .option("exactlyOnce", "true")
            .option("transactionTimeoutMs", 20_000)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            finished = query.awaitTermination(600)
        except StreamingQueryException as exc:
            text = str(exc)
            if outages.overlaps(started, time.monotonic()) and any(s in text for s in BROKER_DOWN):
                # the broker was killed under it: restart from the checkpoint once it is back
                wait_for(outages.all_up, RESOLVE_TIMEOUT_S, "the killed broker to be back")
                continue
            raise AssertionError(f"attempt {attempt} failed, not for a kill: {text}") from exc
        if not finished:
            query.stop()
            raise AssertionError(f"attempt {attempt} did not finish in 600 s")
        return attempt
    raise AssertionError(f"the query failed {attempts} times, each across a broker kill")


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["sync", "async"])
def test_exactly_once_sink_survives_sigkill(
    spark: SparkSession, tmp_path: Path, flush: str, chaos_figures
) -> None:
    rows = [f"row-{i:05d}" for i in range(20_000)]
    broker = ChaosBroker(tmp_path / "broker", flush=flush)
    broker.start()
    try:
        with RocketMQClient(broker.endpoint, timeout_s=30) as client:
            client.create_topic(SRC, queues=4)
            client.create_topic(DST, queues=4)
            for i in range(0, len(rows), 500):
                client.send_batch(SRC, [OutgoingMessage(r.encode()) for r in rows[i : i + 500]])
        rng = random.Random(SEED)
        outages = Outages()
        kills: list[float] = []

        def killer() -> None:
            for _ in range(3):
                time.sleep(rng.uniform(4, 12))
                broker.kill()
                kills.append(time.monotonic())
                outages.windows.append((kills[-1], None))
                broker.start()
                outages.windows[-1] = (kills[-1], time.monotonic())

        thread = threading.Thread(target=killer, name="killer")
        thread.start()
        attempts = run_until_done(spark, broker.endpoint, tmp_path / "cp", outages, attempts=4)
        finished_at = time.monotonic()
        thread.join(120)
        assert len(kills) == 3
        assert kills[0] < finished_at, "the query finished before the first kill"
        # a kill after the query ended may have cut a commit short: one more run finishes it
        attempts += run_until_done(spark, broker.endpoint, tmp_path / "cp", outages, attempts=2)
        with RocketMQClient(broker.endpoint, timeout_s=30) as client:
            wait_for(
                lambda: live_halves(client) == 0,
                RESOLVE_TIMEOUT_S,
                "the broker to resolve every half",
            )
            got = bodies(client, DST)
            health = client.health()["services"]
    except BaseException:
        broker.kill()
        raise
    assert broker.stop() == 0, broker.log_tail()
    chaos_figures(
        f"exactly-once sink under kills flush={flush}",
        kills=3,
        kills_during_query=sum(k < finished_at for k in kills),
        query_attempts=attempts,
        rows=len(rows),
        delivered=sum(got.values()),
        distinct=len(got),
    )
    assert got == Counter(rows), (
        f"{len(rows) - len(got)} rows missing, {sum(got.values()) - len(got)} duplicated"
    )
    assert health["transaction-check"] == "ok", health
