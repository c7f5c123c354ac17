"""Soak: minutes of mixed load on one broker process, watching its memory and open files.

Load, all at once, on one 4-queue topic:

* a batch producer (our client, 20 messages per request, paced) and the official
  Producer (one message per request, paced), each recording what was acknowledged;
* a pull consumer (our client, long polling, committing its offsets);
* the official SimpleConsumer (receive, ack each message);
* a Spark stream (``trigger(availableNow=True)``) run again and again on one checkpoint.

The broker's ``/proc`` figures are sampled every few seconds. After the warm-up and at
the end of the load they are compared: anonymous memory (heap, where a leak shows) and
descriptors other than store files (sockets, pipes...) may grow by at most 10 % in the
full run. Store files are mapped and CPython's mmap keeps a descriptor per mapping, so
their count follows the number of segments and queue files; it may not exceed that
number (plus the active segment's append descriptor). VmRSS is reported too; its
file-backed part counts the mapped store pages read back, which grows with the data
stored, so it is bounded by the same fraction plus the commitlog's size. Each compared
point is the median of a few samples. The short run checks looser bounds. Whatever the
duration, every consumer must have seen every acknowledged message once the load stops
(a consumer that fell behind may catch up; one that makes no progress for 30 s fails).

``SOAK_SECONDS`` overrides the full run's duration (default 600).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from broker_core.client import OutgoingMessage, RocketMQClient
from tests.chaos.load import (
    AckLog,
    ChaosBroker,
    ProcessStats,
    mapped_store_files,
    open_fd_kinds,
    process_stats,
)

TOPIC = "chaos-soak"
QUEUES = 4
BATCH = 20
PULL_GROUP = "soak-pull"
POP_GROUP = "soak-pop"
WINDOW = 3  # samples per compared point


@dataclass(frozen=True, slots=True)
class SoakPlan:
    seconds: float
    warmup_s: float
    sample_every_s: float
    max_anon_growth: float  # fraction of the post-warm-up value
    max_fd_growth: float
    batch_every_s: float = 0.05  # 20 messages per 50 ms: 400 msg/s
    official_every_s: float = 0.02  # about 50 msg/s


SHORT = SoakPlan(seconds=10, warmup_s=3, sample_every_s=1, max_anon_growth=0.5, max_fd_growth=0.5)
FULL = SoakPlan(
    seconds=float(os.environ.get("SOAK_SECONDS", "600")),
    warmup_s=60,
    sample_every_s=10,
    max_anon_growth=0.10,
    max_fd_growth=0.10,
)


@dataclass
class Load:
    """The load threads; what each saw is kept here, failures in ``errors``."""

    endpoint: str
    plan: SoakPlan
    acks: AckLog = field(default_factory=AckLog)
    stop_producing: threading.Event = field(default_factory=threading.Event)
    stop_consuming: threading.Event = field(default_factory=threading.Event)
    pulled: set[bytes] = field(default_factory=set)
    popped: set[bytes] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)
    producers: list[threading.Thread] = field(default_factory=list)
    consumers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for threads, runs in (
            (self.producers, (self._batch_producer, self._official_producer)),
            (self.consumers, (self._pull_consumer, self._simple_consumer)),
        ):
            for run in runs:
                thread = threading.Thread(target=self._guard, args=(run,), name=run.__name__)
                thread.start()
                threads.append(thread)

    def join(self, *, consumers: bool = True) -> None:
        """Stop and join the producers, then (``consumers``) the consumers."""
        self.stop_producing.set()
        if consumers:
            self.stop_consuming.set()
        for thread in self.producers + (self.consumers if consumers else []):
            thread.join(60)
            assert not thread.is_alive(), f"load thread {thread.name} hung"

    def _guard(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # checked by the test, not lost in a thread
            self.errors.append(exc)
            self.stop_producing.set()

    def _batch_producer(self) -> None:
        with RocketMQClient(self.endpoint) as client:
            seq = 0
            while not self.stop_producing.wait(self.plan.batch_every_s):
                bodies = [b"B-%09d" % (seq + i) for i in range(BATCH)]
                seq += BATCH
                receipts = client.send_batch(TOPIC, [OutgoingMessage(b) for b in bodies])
                for body, receipt in zip(bodies, receipts, strict=True):
                    self.acks.record(body, receipt.message_id)

    def _official_producer(self) -> None:
        producer = Producer(ClientConfiguration(self.endpoint, Credentials()), [TOPIC])
        producer.startup()
        try:
            seq = 0
            while not self.stop_producing.wait(self.plan.official_every_s):
                msg = Message()
                msg.topic, msg.body = TOPIC, b"A-%09d" % seq
                seq += 1
                self.acks.record(msg.body, producer.send(msg).message_id)
        finally:
            producer.shutdown()

    def _pull_consumer(self) -> None:
        with RocketMQClient(self.endpoint) as client:
            offsets = dict.fromkeys(range(QUEUES), 0)
            while not self.stop_consuming.is_set():
                for queue_id, offset in offsets.items():
                    batch = client.pull(
                        PULL_GROUP,
                        TOPIC,
                        queue_id,
                        offset,
                        256,
                        long_polling_timeout_ms=200,
                        with_bounds=False,
                    )
                    self.pulled.update(m.body for m in batch.messages)
                    if batch.next_offset != offset:
                        client.update_offset(PULL_GROUP, TOPIC, queue_id, batch.next_offset)
                        offsets[queue_id] = batch.next_offset

    def _simple_consumer(self) -> None:
        consumer = SimpleConsumer(
            ClientConfiguration(self.endpoint, Credentials()),
            POP_GROUP,
            {TOPIC: FilterExpression()},
            await_duration=1,
        )
        consumer.startup()
        try:
            while not self.stop_consuming.is_set():
                for message in consumer.receive(32, 30):
                    self.popped.add(message.body)
                    consumer.ack(message)
        finally:
            consumer.shutdown()


class SparkReader:
    """One streaming query definition, run with availableNow again and again."""

    def __init__(self, spark: SparkSession, endpoint: str, checkpoint: Path) -> None:
        self.stream = (
            spark.readStream.format("rocketmq")
            .option("endpoints", endpoint)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
        )
        self.checkpoint = checkpoint
        self.bodies: set[bytes] = set()
        self.runs = 0
        self.rows = 0

    def run_once(self) -> None:
        def collect(batch: DataFrame, _batch_id: int) -> None:
            rows = batch.select("body").collect()
            self.rows += len(rows)
            self.bodies.update(bytes(row.body) for row in rows)

        query = (
            self.stream.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
        self.runs += 1


@dataclass
class Sampler:
    """Samples the broker's /proc figures every ``every_s`` on its own thread."""

    pid: int
    store_dir: Path
    every_s: float
    samples: list[tuple[float, ProcessStats]] = field(default_factory=list)
    fd_kinds: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> threading.Thread:
        def loop() -> None:
            started = time.monotonic()
            while True:
                elapsed = time.monotonic() - started
                self.samples.append((elapsed, process_stats(self.pid, self.store_dir)))
                self.fd_kinds.append((elapsed, open_fd_kinds(self.pid, self.store_dir)))
                if self.stop.wait(self.every_s):
                    return

        thread = threading.Thread(target=loop, name="sampler", daemon=True)
        thread.start()
        return thread

    def window(self, *, from_s: float | None = None, last: bool = False) -> ProcessStats:
        """Field-wise median of ``WINDOW`` samples: the first ones taken at or after
        ``from_s``, or the ``last`` ones. A median, so that one transient connection (a
        Spark worker's) or one burst of allocations does not count as growth."""
        if last:
            chosen = [s for _, s in self.samples[-WINDOW:]]
        else:
            chosen = [s for t, s in self.samples if t >= (from_s or 0)][:WINDOW]
        return ProcessStats(
            *(int(median(getattr(s, f.name) for s in chosen)) for f in fields(ProcessStats))
        )


def growth(before: int, after: int) -> float:
    return (after - before) / before if before else 0.0


def store_bytes(store_dir: Path) -> int:
    """Bytes written to the commitlog (by its segments' allocated size)."""
    return sum(p.stat().st_blocks * 512 for p in (store_dir / "commitlog").iterdir())


@pytest.mark.parametrize(
    "plan", [pytest.param(SHORT, id="short"), pytest.param(FULL, id="full", marks=pytest.mark.slow)]
)
def test_mixed_load_keeps_memory_and_files_flat(
    tmp_path: Path, spark: SparkSession, plan: SoakPlan, chaos_figures
) -> None:
    broker = ChaosBroker(tmp_path / "broker", flush="async")
    broker.start()
    try:
        figures = soak(broker, spark, tmp_path / "checkpoint", plan)
    except BaseException:
        broker.kill()
        raise
    assert broker.stop() == 0, broker.log_tail()
    chaos_figures("soak", **figures)
    base, end = figures["after_warmup"], figures["at_end"]
    other = [stats["open_fds"] - stats["store_fds"] for stats in (base, end)]
    assert growth(*other) <= plan.max_fd_growth, figures
    # One descriptor per mapped store file (mmap keeps a dup of it), one read descriptor
    # per commitlog segment (reads use pread) and the append descriptor of the active
    # segment; anything beyond that is a leak.
    assert end["store_fds"] <= figures["mapped_files"] + figures["segments"] + 1, figures
    assert growth(base["anon_bytes"], end["anon_bytes"]) <= plan.max_anon_growth, figures
    rss_bound = base["rss_bytes"] * (1 + plan.max_anon_growth) + figures["stored_bytes"]
    assert end["rss_bytes"] <= rss_bound, figures


def drain(load: Load, acked: set[bytes], stall_s: float) -> None:
    """Wait until the pull and simple consumers have seen every acknowledged message;
    fail once neither has made progress for ``stall_s`` (a consumer that fell behind
    under load may take a while, one that stopped never gets there)."""
    progress, changed_at = (-1, -1), time.monotonic()
    while not (acked <= load.pulled and acked <= load.popped):
        if (len(load.pulled), len(load.popped)) != progress:
            progress, changed_at = (len(load.pulled), len(load.popped)), time.monotonic()
        if time.monotonic() - changed_at > stall_s or load.errors:
            missing = {"pull": sorted(acked - load.pulled), "simple": sorted(acked - load.popped)}
            raise AssertionError(
                f"consumers stalled for {stall_s} s; missing "
                + ", ".join(f"{name}: {len(m)} (e.g. {m[:3]})" for name, m in missing.items())
                + f"; load errors: {load.errors!r}"
            )
        load.stop_consuming.wait(0.5)  # never set here: a pause between looks


def soak(
    broker: ChaosBroker, spark: SparkSession, checkpoint: Path, plan: SoakPlan
) -> dict[str, Any]:
    """Run the load for ``plan.seconds``, drain, check nothing was missed; figures."""
    with RocketMQClient(broker.endpoint) as admin:
        admin.create_topic(TOPIC, queues=QUEUES)
        admin.create_group(POP_GROUP, consume_from_where="first_offset")  # sends may come first
    load = Load(broker.endpoint, plan)
    reader = SparkReader(spark, broker.endpoint, checkpoint)
    store_dir = broker.workdir / "store"
    sampler = Sampler(broker.pid, store_dir, plan.sample_every_s)
    sampler_thread = sampler.start()
    started = time.monotonic()
    load.start()
    try:
        while time.monotonic() - started < plan.seconds and not load.errors:
            reader.run_once()
        load.join(consumers=False)
    finally:
        sampler.stop.set()
        sampler_thread.join()
        if load.errors:
            load.join()
    assert not load.errors, f"load thread failed: {load.errors!r}"
    load_s = time.monotonic() - started
    after_warmup, at_end = sampler.window(from_s=plan.warmup_s), sampler.window(last=True)
    stored, mapped = store_bytes(store_dir), mapped_store_files(store_dir)
    acked = set(load.acks.snapshot())
    lag_at_end = {"pull": len(acked - load.pulled), "simple": len(acked - load.popped)}
    drain(load, acked, stall_s=30)
    load.join()
    reader.run_once()
    missing = {
        "pull": len(acked - load.pulled),
        "simple": len(acked - load.popped),
        "spark": len(acked - reader.bodies),
    }
    assert missing == {"pull": 0, "simple": 0, "spark": 0}, missing
    return {
        "load_seconds": round(load_s, 1),
        "acknowledged": len(acked),
        "pulled": len(load.pulled),
        "popped": len(load.popped),
        "spark_rows": reader.rows,
        "spark_runs": reader.runs,
        "stored_bytes": stored,
        "mapped_files": mapped,
        "segments": sum(1 for _ in (store_dir / "commitlog").iterdir()),
        "lag_at_end": lag_at_end,
        "after_warmup": after_warmup.as_dict(),
        "at_end": at_end.as_dict(),
        "samples": len(sampler.samples),
        "fds_after_warmup": next(k for t, k in sampler.fd_kinds if t >= plan.warmup_s),
        "fds_at_end": sampler.fd_kinds[-1][1],
        "other_fds_series": [s.other_fds for _, s in sampler.samples],
        "peak_rss_bytes": max(s.rss_bytes for _, s in sampler.samples),
    }
