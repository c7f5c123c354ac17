"""``python -m bench.trace_cost``: what the broker's own message trace costs, A/B.

Broker processes in the same run, one per trace setting (``trace_broker`` off, a sampled
ratio, all), each fed the same work round after round, in rotating order so drift of the
shared machine hits every side alike:

* produce: ``bench produce``'s bulk sends (batches of 256 messages of 128 bytes, 5 in
  flight), ``--batches`` per round;
* consume: ``bench consume``'s drain by raw offset pull (8 queues, 10,000 per pull) of a
  backlog of ``--backlog`` messages filled before the round (not timed).

Printed per workload: each side's median msg/s and its median per-round cost against off
(1 − side/off, the two measured back to back) in per cent, and how many trace messages the
broker wrote (so a side that recorded nothing cannot pass as cheap).

On a loaded machine the end-to-end figures are noise, so :func:`cpu_per_message_us` also
measures in process, in CPU time of one thread (``time.thread_time``, which another
process's load does not inflate): a broker's ``send`` of 256-message batches, and the trace
thread's work for them (building the records and appending the trace messages).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import consume, produce
from broker_core.client import RocketMQClient
from broker_core.protocol.trace import TRACE_TOPIC
from broker_core.server.launcher import BrokerProcess, launch_broker

BODY = bytes(range(128))
SIDES = {"off": "off", "sampled 1%": "0.01", "all": "all"}


def _start(root: Path, name: str, setting: str) -> BrokerProcess:
    config: dict[str, dict[str, Any]] = {
        "broker": {"trace_broker": setting, "default_queue_nums": 8},
        "store": {"segment_size_bytes": 256 << 20},
    }
    return launch_broker(root / name.replace(" ", "-").replace("%", ""), config=config)


def _produce_round(client: RocketMQClient, batches: int) -> float:
    batch = [BODY] * produce.BATCH
    start = time.perf_counter()
    for _ in range(batches):
        client.send_batch_async("bench-trace-p", batch)
    client.flush()
    return batches * produce.BATCH / (time.perf_counter() - start)


def _consume_round(client: RocketMQClient, topic: str, count: int) -> float:
    client.create_topic(topic, queues=consume.QUEUES)
    for start in range(0, count, consume.FILL_BATCH):
        client.send_batch(topic, [BODY] * min(consume.FILL_BATCH, count - start))
    started = time.perf_counter()
    read = consume.drain(client, topic, consume.QUEUES)
    elapsed = time.perf_counter() - started
    if read != count:
        raise RuntimeError(f"drained {read} of {count}")
    return count / elapsed


def _trace_messages(client: RocketMQClient) -> int:
    try:
        return client.query_offset(TRACE_TOPIC, 0, "END")
    except Exception:  # off: no trace topic
        return 0


def measure(rounds: int, batches: int, backlog: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    procs = {name: _start(root, name, setting) for name, setting in SIDES.items()}
    rates: dict[str, dict[str, list[float]]] = {"produce": {}, "consume": {}}
    try:
        clients = {
            name: RocketMQClient(p.endpoint, max_in_flight=produce.IN_FLIGHT, timeout_s=60)
            for name, p in procs.items()
        }
        for client in clients.values():
            client.create_topic("bench-trace-p", queues=8)
            _produce_round(client, max(1, batches // 10))  # warm-up
        names = list(SIDES)
        for number in range(rounds):
            order = names[number % len(names) :] + names[: number % len(names)]
            for name in order:
                rates["produce"].setdefault(name, []).append(_produce_round(clients[name], batches))
            for name in order:
                rates["consume"].setdefault(name, []).append(
                    _consume_round(clients[name], f"bench-trace-c{number}", backlog)
                )
        time.sleep(1)  # the trace threads write what they buffered (200 ms rounds)
        written = {name: _trace_messages(c) for name, c in clients.items()}
        for client in clients.values():
            client.close()
    finally:
        for p in procs.values():
            p.stop()
        shutil.rmtree(root, ignore_errors=True)
    for workload, by_side in rates.items():
        for name, side in by_side.items():
            cost = statistics.median(
                1 - on / off for off, on in zip(by_side["off"], side, strict=True)
            )
            print(
                f"{workload:>7} trace {name:>10}: {statistics.median(side):>10,.0f} msg/s, "
                f"cost vs off {100 * cost:+6.2f} % (median of {rounds} paired rounds); "
                f"trace messages written: {written[name]:,}",
                flush=True,
            )


def cpu_per_message_us(setting: str, batches: int = 100, batch: int = 256) -> tuple[float, float]:
    """(send CPU µs per message, trace-thread CPU µs per message) of an in-process broker
    with ``trace_broker = setting`` (best of 3)."""
    from broker_core.broker.broker import Broker
    from broker_core.config import BrokerConfig, StoreConfig
    from broker_core.message import Message

    best = (float("inf"), float("inf"))
    for _ in range(3):
        root = Path(tempfile.mkdtemp(prefix="bench-trace-cpu-"))
        broker = Broker(
            BrokerConfig(trace_broker=setting, trace_flush_interval_ms=3_600_000),
            StoreConfig(store_dir=str(root), segment_size_bytes=256 << 20),
        )
        broker.start()
        try:
            messages = lambda: [Message("bench", BODY, queue_id=-1) for _ in range(batch)]  # noqa: E731
            broker.sending.send(messages())
            broker.trace.flush()
            start = time.thread_time()
            for _ in range(batches):
                broker.sending.send(messages())
            send_s = time.thread_time() - start
            start = time.thread_time()
            broker.trace.flush()
            trace_s = time.thread_time() - start
        finally:
            broker.stop()
            shutil.rmtree(root, ignore_errors=True)
        count = batches * batch
        if send_s + trace_s < sum(best) * count / 1e6:
            best = (send_s / count * 1e6, trace_s / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--cpu-only", action="store_true", help="only the in-process CPU figures")
    args = parser.parse_args()
    for name, setting in SIDES.items():
        send_us, trace_us = cpu_per_message_us(setting)
        print(
            f"in process, trace {name:>10}: send {send_us:.2f} us/msg CPU, trace thread "
            f"{trace_us:.2f} us/msg CPU ({100 * trace_us / send_us:.1f} % of the send)",
            flush=True,
        )
    if not args.cpu_only:
        measure(args.rounds, args.batches, args.backlog)


if __name__ == "__main__":
    main()
