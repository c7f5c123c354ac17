"""The standard-protocol fallback's read and write rate against the bulk path.

``python -m bench.fallback_rate [MESSAGES]`` starts two brokers on loopback: one with our
services (SendBulk, PullRaw) and one with ``--no-extensions`` (so the client uses
SendMessage and PullMessage, ``broker_core/client/standard.py``). On each it writes
``MESSAGES`` (default 20,000) bodies of 128 B with ``send_columns`` in requests of 1,000,
then reads them back with ``pull_columns`` (the Spark source's read call), three rounds
each, alternating the brokers so other load on the machine falls on both. It prints the
best round's messages/s per path and the ratio. Not part of ``bench all``: a figure for
the fallback, not a tracked benchmark.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker

BODY_BYTES = 128
REQUEST_MESSAGES = 1_000
QUEUES = 4
ROUNDS = 3
CONFIG = {"broker": {"default_queue_nums": QUEUES}, "store": {"segment_size_bytes": 256 << 20}}


def write_rate(client: RocketMQClient, topic: str, count: int) -> float:
    """Messages/s of ``count`` sends in requests of REQUEST_MESSAGES."""
    bodies = [b"x" * BODY_BYTES] * REQUEST_MESSAGES
    started = time.perf_counter()
    for _ in range(count // REQUEST_MESSAGES):
        client.send_columns_async(topic, bodies)
    client.flush()
    return count / (time.perf_counter() - started)


def read_rate(client: RocketMQClient, topic: str, count: int) -> float:
    """Messages/s of reading every queue of ``topic`` from 0 to its end; checks the count."""
    started, read = time.perf_counter(), 0
    for queue in range(QUEUES):
        offset, end = 0, client.query_offset(topic, queue, "END")
        while offset < end:
            batch = client.pull_columns("GID_rate", topic, queue, offset, end - offset)
            read += batch.count
            offset = batch.next_offset
    if read != count:
        raise RuntimeError(f"read {read} messages of {topic}, expected {count}")
    return count / (time.perf_counter() - started)


def measure(brokers: dict[str, BrokerProcess], count: int) -> dict[str, tuple[float, float]]:
    """Path → best (write, read) messages/s over ROUNDS rounds."""
    best = {name: (0.0, 0.0) for name in brokers}
    for number in range(ROUNDS):
        for name, proc in brokers.items():
            topic = f"rate-{number}"
            with RocketMQClient(proc.endpoint) as client:
                written = write_rate(client, topic, count)
                read = read_rate(client, topic, count)
            best[name] = (max(best[name][0], written), max(best[name][1], read))
    return best


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    count = int(args[0]) if args else 20_000
    count -= count % REQUEST_MESSAGES
    with tempfile.TemporaryDirectory(prefix="fallback-rate-") as tmp:
        brokers = {
            "bulk": launch_broker(Path(tmp) / "bulk", config=CONFIG),
            "standard": launch_broker(
                Path(tmp) / "standard", config=CONFIG, extra_args=["--no-extensions"]
            ),
        }
        try:
            best = measure(brokers, count)
        finally:
            for proc in brokers.values():
                proc.stop()
    for name, (written, read) in best.items():
        print(f"{name:9} write {written:10,.0f} msg/s   read {read:10,.0f} msg/s")
    (bw, br), (sw, sr) = best["bulk"], best["standard"]
    print(f"standard / bulk: write {sw / bw:.2f}x, read {sr / br:.2f}x ({count} x {BODY_BYTES} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
