"""``python -m bench.metrics_cost``: what metrics cost on the produce hot path.

Two broker processes in the same run, one with ``--metrics-listen`` (scraped once a
round, as Prometheus would) and one without. Rounds alternate between them (and which goes first) so
drift of the shared machine hits both sides alike; each round times ``--batches`` sends of
``--batch`` messages of 128 bytes, one after the other, from one client. Printed: the
median msg/s of each side and the difference (1 − on/off) in per cent, for batch sends and
for single-message sends (where a per-request cost weighs most). On a shared machine the
end-to-end difference is within noise, so the exact cost of the hooks is also measured in
process (:func:`hook_cost_us`) and given as a share of the measured request time.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import grpc

from broker_core.client import RocketMQClient
from broker_core.metrics.recorder import Recorder
from broker_core.metrics.timing import timing_wrapper
from broker_core.server.gate import Gate
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


def measure(batch: int, batches: int, rounds: int) -> tuple[float, float, float]:
    """(median msg/s without metrics, with metrics, median of each round's on/off ratio:
    the two sides of a round ran back to back, so their ratio is the least noisy)."""
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
        shutil.rmtree(root, ignore_errors=True)  # two stores with 1 GiB segments
    ratios = [
        on_rate / off_rate for off_rate, on_rate in zip(rates["off"], rates["on"], strict=True)
    ]
    return (
        statistics.median(rates["off"]),
        statistics.median(rates["on"]),
        statistics.median(ratios),
    )


def hook_cost_us(batch: int, calls: int = 200_000) -> float:
    """Microseconds the metrics add to one SendMessage of ``batch`` messages, measured in
    process: the gate's interception with the timing wrapper installed, the wrapped call
    of a no-op handler and the send handler's ``messages_in``, minus the same gate without
    wrappers calling the bare handler (best of 5 each)."""
    recorder = Recorder()
    bare = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    details = SimpleNamespace(method="/apache.rocketmq.v2.MessagingService/SendMessage")
    plain, metered = Gate(), Gate([timing_wrapper(recorder)])
    plain.open()
    metered.open()
    bodies = [BODY] * batch

    def run(gate: Gate, count: bool) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            handler = gate.intercept_service(lambda _details: bare, details)
            assert handler is not None  # the method exists
            handler.unary_unary(None, None)
            if count:
                recorder.messages_in("bench-metrics", len(bodies), sum(map(len, bodies)))
        return (time.perf_counter() - start) / calls * 1e6

    return min(run(metered, True) for _ in range(5)) - min(run(plain, False) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    for batch, batches in ((256, args.batches), (1, args.batches * 10)):
        off, on, ratio = measure(batch, batches, args.rounds)
        hook_us = hook_cost_us(batch)
        request_us = batch / off * 1e6
        print(
            f"batch {batch:>3}: metrics off {off:>10,.0f} msg/s, on {on:>10,.0f} msg/s, "
            f"paired end-to-end cost {100 * (1 - ratio):+.2f} %; hooks {hook_us:.2f} us "
            f"of a {request_us:,.0f} us request = {100 * hook_us / request_us:.2f} %",
            flush=True,
        )


if __name__ == "__main__":
    main()
