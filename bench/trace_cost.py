"""``python -m bench.trace_cost``: what the broker's own message trace costs, A/B.

One broker process, its ``trace_broker`` set live (``UpdateBrokerConfig``) to each setting
in turn (off, a sampled ratio, all) and fed the same work under each, round after round,
in rotating order, so drift of the shared machine hits every side alike and no side runs
in a process of its own (on two cores, broker processes differ from each other by more
than the effect measured):

* produce: ``bench produce``'s bulk sends (batches of 256 messages of 128 bytes, 5 in
  flight), ``--batches`` per round;
* consume: ``bench consume``'s drain by raw offset pull (8 queues, 10,000 per pull) of a
  backlog of ``--backlog`` messages filled once before the rounds (not timed), ``--passes``
  drains per round (one drain's broker CPU is near ``/proc``'s 10 ms tick).

Printed per workload and side:

* msg/s (median) and its paired cost against off (1 − side/off, the two measured back to
  back; median);
* the CPU time the broker process used per message (``/proc``, median) and what trace
  adds to off's, as a share of the broker's CPU: the median of the paired rounds, and
  their mean ± its standard error — the broker's CPU per message spreads ±10 % from round
  to round on two cores, so this A/B resolves a few per cent at best;
* the trace's own CPU per message, read off the broker's ``/metrics``
  (``rocketmq_trace_cpu_seconds_total``: the stored hook on the send path and the trace
  thread, each timed by the thread's CPU clock), as a share of off's broker CPU: the
  direct figure, which that spread does not blur (what it leaves out: effects of the
  trace on other threads, such as caches; the A/B bounds those);
* the records written (so a side that recorded nothing cannot pass as cheap).

On a loaded machine the end-to-end rates are noise, so :func:`in_process` also measures in
process, in CPU time (which another process's load inflates far less than wall time): the
broker paths of bench produce and bench consume, and the trace thread's work for them.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import consume, proc_cpu, produce
from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker

BODY = bytes(range(128))
SIDES = {"off": "off", "sampled 1%": "0.01", "all": "all"}


def _start(root: Path) -> BrokerProcess:
    config: dict[str, dict[str, Any]] = {
        "broker": {"trace_broker": "off", "default_queue_nums": 8},
        "store": {"segment_size_bytes": 256 << 20},
    }
    return launch_broker(
        root / "broker", config=config, extra_args=["--metrics-listen", "127.0.0.1:0"]
    )


def metrics_url(proc: BrokerProcess) -> str:
    """The ``/metrics`` URL the broker printed (``METRICS <url>``) before it was ready."""
    for line in proc.output:
        if line.startswith("METRICS "):
            return line.split()[1]
    raise RuntimeError("the broker printed no METRICS line")


def _trace_totals(url: str) -> tuple[float, float, float]:
    """(hook CPU seconds, thread CPU seconds, records written) of the broker so far."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    cpu: dict[str, float] = {}
    records = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rocketmq_trace_cpu_seconds_total":
                cpu[sample.labels["part"]] = sample.value
            elif sample.name == "rocketmq_trace_records_total":
                records = sample.value
    return cpu["hook"], cpu["thread"], records


def _produce_round(client: RocketMQClient, proc: BrokerProcess, batches: int) -> proc_cpu.Round:
    batch = [BODY] * produce.BATCH
    with proc_cpu.Round(proc.process.pid) as r:
        for _ in range(batches):
            client.send_batch_async("bench-trace-p", batch)
        client.flush()
        r.done(batches * produce.BATCH)
    return r


def _fill(client: RocketMQClient, topic: str, count: int) -> None:
    client.create_topic(topic, queues=consume.QUEUES)
    for start in range(0, count, consume.FILL_BATCH):
        client.send_batch(topic, [BODY] * min(consume.FILL_BATCH, count - start))


def _consume_round(
    client: RocketMQClient, proc: BrokerProcess, topic: str, count: int, passes: int
) -> proc_cpu.Round:
    """``passes`` drains of ``topic``'s ``count`` messages (filled once, before the
    rounds): enough broker CPU per round that ``/proc``'s 10 ms tick is ≤ 2 % of it."""
    with proc_cpu.Round(proc.process.pid) as r:
        read = sum(consume.drain(client, topic, consume.QUEUES) for _ in range(passes))
        r.done(count * passes)
    if read != count * passes:
        raise RuntimeError(f"drained {read} of {count * passes}")
    return r


@dataclass
class SideRound:
    """One round of one side: the broker's and client's CPU (``proc_cpu``), and the
    trace's own CPU seconds per message (hook, thread) and records it wrote."""

    work: proc_cpu.Round
    hook_cpu: float
    thread_cpu: float
    records: float


def measure(rounds: int, batches: int, backlog: int, passes: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    proc = _start(root)
    runs: dict[str, dict[str, list[SideRound]]] = {"produce": {}, "consume": {}}
    try:
        url = metrics_url(proc)
        client = RocketMQClient(proc.endpoint, max_in_flight=produce.IN_FLIGHT, timeout_s=60)
        client.create_topic("bench-trace-p", queues=8)
        _produce_round(client, proc, max(1, batches // 10))  # warm-up
        _fill(client, "bench-trace-c", backlog)

        def side(name: str, count: int, work: Callable[[], proc_cpu.Round]) -> SideRound:
            client.update_broker_config("trace_broker", SIDES[name])
            hook, thread, records = _trace_totals(url)
            r = work()
            client.update_broker_config("trace_broker", "off")  # writes what was taken
            hook2, thread2, records2 = _trace_totals(url)
            return SideRound(
                r, (hook2 - hook) / count, (thread2 - thread) / count, records2 - records
            )

        produced, drained = batches * produce.BATCH, backlog * passes
        names = list(SIDES)
        for number in range(rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            for name in order:
                runs["produce"].setdefault(name, []).append(
                    side(name, produced, lambda: _produce_round(client, proc, batches))
                )
            for name in order:
                runs["consume"].setdefault(name, []).append(
                    side(
                        name,
                        drained,
                        lambda: _consume_round(client, proc, "bench-trace-c", backlog, passes),
                    )
                )
        client.close()
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    for workload, by_side in runs.items():
        _report(workload, by_side)


def _report(workload: str, by_side: dict[str, list[SideRound]]) -> None:
    """Per side: msg/s and its paired cost against off; the broker's CPU per message and
    what the side adds to off's (median, mean ± standard error), as a share of the
    broker's CPU; the trace's own CPU (hook, thread) as a share of off's broker CPU."""
    off = [s.work for s in by_side["off"]]
    off_cpu = statistics.median(o.broker_cpu for o in off)
    for name, rounds in by_side.items():
        side = [s.work for s in rounds]
        paired = statistics.median(1 - s.rate / o.rate for o, s in zip(off, side, strict=True))
        adds = [s.broker_cpu / o.broker_cpu - 1 for o, s in zip(off, side, strict=True)]
        error = statistics.stdev(adds) / math.sqrt(len(adds)) if len(adds) > 1 else math.nan
        hook = statistics.fmean(s.hook_cpu for s in rounds)
        thread = statistics.fmean(s.thread_cpu for s in rounds)
        print(
            f"{workload:>7} trace {name:>10}: {statistics.median(r.rate for r in side):>9,.0f} "
            f"msg/s (paired cost {100 * paired:+5.1f} %); broker CPU "
            f"{statistics.median(r.broker_cpu for r in side) * 1e6:5.2f} us/msg, A/B adds "
            f"{100 * statistics.median(adds):+5.1f} % (mean {100 * statistics.fmean(adds):+5.1f}"
            f" ± {100 * error:.1f}); the trace's own CPU {(hook + thread) * 1e6:.3f} us/msg "
            f"= {100 * (hook + thread) / off_cpu:.1f} % of off's (hook {hook * 1e6:.3f}, "
            f"thread {thread * 1e6:.3f}); records written "
            f"{sum(s.records for s in rounds):,.0f}",
            flush=True,
        )


def in_process(setting: str, batches: int = 150) -> tuple[float, float, float, float]:
    """(send µs/msg, trace of the sends µs/msg, raw pull µs/msg, trace of the pulls µs/msg)
    of an in-process broker with ``trace_broker = setting``: ``send_columns`` of 256-message
    column batches (bench produce's broker path) and raw pulls of 10,000 from 8 queues
    (bench consume's), in process CPU (every thread, dispatch included); the trace flush of
    each in the flushing thread's CPU (the trace thread's work, run here)."""
    from broker_core.broker.broker import Broker
    from broker_core.broker.pull import PullRequest
    from broker_core.config import BrokerConfig, StoreConfig
    from broker_core.message import Message, new_message_id
    from broker_core.store.columns import encode_messages

    def made(count: int) -> list[Any]:
        return [
            encode_messages(
                [Message("bench", BODY, -1, {"UNIQ_KEY": new_message_id()}) for _ in range(256)],
                max_body_bytes=1024,
                max_properties_bytes=1024,
            )
            for _ in range(count)
        ]

    def flushed(broker: Broker) -> float:
        start = time.thread_time()
        if broker.trace.on:
            broker.trace.flush()
        return time.thread_time() - start

    root = Path(tempfile.mkdtemp(prefix="bench-trace-cpu-"))
    config = BrokerConfig(
        trace_broker=setting, trace_flush_interval_ms=3_600_000, default_queue_nums=8
    )
    broker = Broker(config, StoreConfig(store_dir=str(root), segment_size_bytes=256 << 20))
    broker.start()
    try:
        broker.sending.send_columns(made(1)[0])
        broker.store.wait_dispatched()
        flushed(broker)
        work = made(batches)
        start = time.process_time()
        for batch in work:
            broker.sending.send_columns(batch)
        broker.store.wait_dispatched()
        send = time.process_time() - start
        trace_send = flushed(broker)
        read, start = 0, time.process_time()
        for queue_id in range(8):
            offset = 0
            while True:
                request = PullRequest(
                    "bench", queue_id, offset, 10_000, max_bytes=64 << 20, raw=True
                )
                got = broker.pulling.pull("bench-reader", request)
                if got.raw is None or not got.raw.count:
                    break
                read, offset = read + got.raw.count, got.next_offset
        pull = time.process_time() - start
        trace_pull = flushed(broker)
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    sent = batches * 256
    return (send / sent * 1e6, trace_send / sent * 1e6, pull / read * 1e6, trace_pull / read * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5, help="drains of the backlog per round")
    parser.add_argument("--cpu-only", action="store_true", help="only the in-process CPU figures")
    args = parser.parse_args()
    for name, setting in SIDES.items():
        send, trace_send, pull, trace_pull = in_process(setting)
        print(
            f"in process, trace {name:>10}: send {send:.2f} us/msg CPU, its trace "
            f"{trace_send:.2f} ({100 * trace_send / send:.1f} %); raw pull {pull:.2f} us/msg, "
            f"its trace {trace_pull:.3f} ({100 * trace_pull / pull:.1f} %)",
            flush=True,
        )
    if not args.cpu_only:
        measure(args.rounds, args.batches, args.backlog, args.passes)


if __name__ == "__main__":
    main()
