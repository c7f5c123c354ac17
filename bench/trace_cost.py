"""``python -m bench.trace_cost``: what the broker's own message trace costs, A/B.

One broker process, its ``trace_broker`` set live (``UpdateBrokerConfig``) to each setting
in turn (off, a sampled ratio, all) and fed the same work under each, round after round,
in rotating order, so drift of the shared machine hits every side alike and no side runs
in a process of its own (two broker processes differ by several per cent on two cores,
more than the effect measured):

* produce: ``bench produce``'s bulk sends (batches of 256 messages of 128 bytes, 5 in
  flight), ``--batches`` per round;
* consume: ``bench consume``'s drain by raw offset pull (8 queues, 10,000 per pull) of a
  backlog of ``--backlog`` messages filled once before the rounds (not timed), ``--passes``
  drains per round (one drain's broker CPU is near ``/proc``'s 10 ms tick).

Printed per workload: each side's median msg/s and its median per-round cost against off
(1 − side/off, the two measured back to back) in per cent — noise on a loaded machine — and
the load-proof figure: the CPU time the broker process used per message (``/proc``), and
what trace adds to off's, as a share of the broker's CPU and of the broker's + the
client's (the whole ``bench produce`` / ``bench consume`` work), medians over the rounds;
the CPU of the broker's trace thread itself (``/proc/<pid>/task``, by its OS name) per
message, as a share of off's broker CPU — the direct figure, which the broker's round-to-
round spread (±10 % on two cores) does not blur; and how many trace messages the broker
wrote (so a side that recorded nothing cannot pass as cheap).

On a loaded machine the end-to-end rates are noise, so :func:`in_process` also measures in
process, in CPU time (which another process's load inflates far less than wall time): the
broker paths of bench produce and bench consume, and the trace thread's work for them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import consume, proc_cpu, produce
from broker_core.client import RocketMQClient
from broker_core.protocol.trace import TRACE_TOPIC
from broker_core.server.launcher import BrokerProcess, launch_broker

BODY = bytes(range(128))
SIDES = {"off": "off", "sampled 1%": "0.01", "all": "all"}
TRACE_THREAD = "broker-trace"  # the recorder's thread, by its OS name (``name_os_thread``)


def _start(root: Path) -> BrokerProcess:
    config: dict[str, dict[str, Any]] = {
        "broker": {"trace_broker": "off", "default_queue_nums": 8},
        "store": {"segment_size_bytes": 256 << 20},
    }
    return launch_broker(root / "broker", config=config)


def _produce_round(client: RocketMQClient, proc: BrokerProcess, batches: int) -> proc_cpu.Round:
    batch = [BODY] * produce.BATCH
    with proc_cpu.Round(proc.process.pid, TRACE_THREAD) as r:
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
    with proc_cpu.Round(proc.process.pid, TRACE_THREAD) as r:
        read = sum(consume.drain(client, topic, consume.QUEUES) for _ in range(passes))
        r.done(count * passes)
    if read != count * passes:
        raise RuntimeError(f"drained {read} of {count * passes}")
    return r


def _trace_messages(client: RocketMQClient) -> int:
    try:
        return client.query_offset(TRACE_TOPIC, 0, "END")
    except Exception:  # never on yet: no trace topic
        return 0


def measure(rounds: int, batches: int, backlog: int, passes: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    proc = _start(root)
    runs: dict[str, dict[str, list[proc_cpu.Round]]] = {"produce": {}, "consume": {}}
    written = dict.fromkeys(SIDES, 0)
    try:
        client = RocketMQClient(proc.endpoint, max_in_flight=produce.IN_FLIGHT, timeout_s=60)
        client.create_topic("bench-trace-p", queues=8)
        _produce_round(client, proc, max(1, batches // 10))  # warm-up
        _fill(client, "bench-trace-c", backlog)

        def side(name: str, work: Callable[[], proc_cpu.Round]) -> proc_cpu.Round:
            client.update_broker_config("trace_broker", SIDES[name])
            before = _trace_messages(client)
            r = work()
            client.update_broker_config("trace_broker", "off")  # writes what was taken
            written[name] += _trace_messages(client) - before
            return r

        names = list(SIDES)
        for number in range(rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            for name in order:
                runs["produce"].setdefault(name, []).append(
                    side(name, lambda: _produce_round(client, proc, batches))
                )
            for name in order:
                runs["consume"].setdefault(name, []).append(
                    side(
                        name,
                        lambda: _consume_round(client, proc, "bench-trace-c", backlog, passes),
                    )
                )
        client.close()
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    for workload, by_side in runs.items():
        _report(workload, by_side, written)


def _report(
    workload: str, by_side: dict[str, list[proc_cpu.Round]], written: dict[str, int]
) -> None:
    """Per side: msg/s and its paired cost against off; the broker's CPU per message and
    what it adds to off's, as a share of the broker's CPU and of the whole workload's
    (broker + client), medians over the rounds."""
    off = by_side["off"]
    for name, side in by_side.items():
        paired = statistics.median(1 - s.rate / o.rate for o, s in zip(off, side, strict=True))
        cpu = statistics.median(s.broker_cpu for s in side) * 1e6
        added = [s.broker_cpu - o.broker_cpu for o, s in zip(off, side, strict=True)]
        of_broker = statistics.median(a / o.broker_cpu for a, o in zip(added, off, strict=True))
        of_all = statistics.median(
            a / (o.broker_cpu + o.client_cpu) for a, o in zip(added, off, strict=True)
        )
        # the trace thread's own CPU (its records built and written), the mean over the
        # rounds (each is a few of /proc's 10 ms ticks), against off's broker CPU
        thread = statistics.fmean(s.thread_cpu for s in side)
        of_off = thread / statistics.median(o.broker_cpu for o in off)
        print(
            f"{workload:>7} trace {name:>10}: {statistics.median(s.rate for s in side):>9,.0f} "
            f"msg/s (paired cost {100 * paired:+6.1f} %); broker CPU {cpu:5.2f} us/msg, "
            f"trace adds {100 * of_broker:+5.1f} % of the broker's CPU, {100 * of_all:+5.1f} % "
            f"of broker + client; the trace thread {thread * 1e6:.3f} us/msg "
            f"({100 * of_off:.1f} % of off's broker CPU); trace messages written: "
            f"{written[name]:,}",
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
