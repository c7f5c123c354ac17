"""``python -m bench.metrics_cost``: what metrics cost on the produce hot path.

Two broker processes in the same run, one with ``--metrics-listen`` (scraped once a
round, as Prometheus would) and one without. Rounds alternate between them (and which goes first) so
drift of the shared machine hits both sides alike; each round times ``--batches`` sends of
``--batch`` messages of 128 bytes, one after the other, from one client. Printed: the
median msg/s of each side and the overhead (1 − on/off) in per cent, for batch sends and
for single-message sends (where a per-request cost weighs most).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker

BODY = bytes(range(128))


def _rate(client: RocketMQClient, batch: int, batches: int) -> float:
    messages = [BODY] * batch
    start = time.perf_counter()
    for _ in range(batches):
        client.send_batch("bench-metrics", messages)
    return batch * batches / (time.perf_counter() - start)


def _metrics_url(proc: BrokerProcess) -> str:
    return next(line.split()[1] for line in proc.output if line.startswith("METRICS "))


def measure(batch: int, batches: int, rounds: int) -> tuple[float, float]:
    """(median msg/s without metrics, median msg/s with metrics)."""
    root = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    off = launch_broker(root / "off")
    on = launch_broker(root / "on", extra_args=["--metrics-listen", "127.0.0.1:0"])
    rates: dict[str, list[float]] = {"off": [], "on": []}
    try:
        with RocketMQClient(off.endpoint) as c_off, RocketMQClient(on.endpoint) as c_on:
            for client in (c_off, c_on):
                client.create_topic("bench-metrics", queues=8)
                _rate(client, batch, max(1, batches // 10))  # warm-up
            for number in range(rounds):
                sides = [("off", c_off), ("on", c_on)]
                for side, client in sides if number % 2 else sides[::-1]:  # alternate order
                    rates[side].append(_rate(client, batch, batches))
                with urllib.request.urlopen(_metrics_url(on), timeout=10) as reply:
                    reply.read()
    finally:
        off.stop()
        on.stop()
    return statistics.median(rates["off"]), statistics.median(rates["on"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    for batch, batches in ((256, args.batches), (1, args.batches * 10)):
        off, on = measure(batch, batches, args.rounds)
        print(f"batch {batch:>3}: metrics off {off:>10,.0f} msg/s, on {on:>10,.0f} msg/s, "
              f"overhead {100 * (1 - on / off):+.2f} %", flush=True)


if __name__ == "__main__":
    main()
