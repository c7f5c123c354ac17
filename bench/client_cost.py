"""Client CPU per message of produce's bulk send loop, against a real broker: an A/B tool.

The loop is ``bench/produce.py``'s: ``send_batch_async`` of 256 bodies of 128 bytes,
``IN_FLIGHT`` requests in flight, receipts kept (the bench asks for them), then
``flush``. The broker runs as its own process (``launch_broker``), so this process's CPU
time (``time.process_time``: the calling thread and grpcio's threads) is the client's.
Each round times ``--batches`` batches; the least CPU µs per message over ``--rounds``
is printed as JSON, with the wall-clock rate of that round beside it.

``--against REV`` runs the same loop with the ``broker_core`` of git revision REV too
(exported as ``broker_core_base`` by :func:`bench.send_cost.export_revision`), both
clients on the same broker, interleaved round by round::

    python -m bench.client_cost --rounds 9 --against HEAD~2
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.produce import BATCH, BODY_BYTES, IN_FLIGHT
from bench.send_cost import export_revision
from broker_core.server.launcher import launch_broker

TOPIC = "bench-client-cost"


def _round(client: Any, batches: int, batch: list[bytes]) -> tuple[float, float]:
    """(client CPU µs per message, msg/s) of ``batches`` async batch sends and a flush."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(batches):
        client.send_batch_async(TOPIC, batch)
    client.flush()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    count = batches * len(batch)
    return cpu * 1e6 / count, count / wall


def measure(rounds: int, batches: int, against: str | None = None) -> dict[str, dict[str, float]]:
    """Per package: the least client CPU µs/msg over ``rounds`` and that round's msg/s."""
    batch = [bytes(range(BODY_BYTES))] * BATCH
    with tempfile.TemporaryDirectory() as tmp:
        packages = ["broker_core"]
        if against:
            packages.append(export_revision(against, Path(tmp)))
        broker = launch_broker(Path(tmp) / "broker", config={"broker": {"default_queue_nums": 8}})
        clients: dict[str, Any] = {}
        try:
            for pkg in packages:
                cls = importlib.import_module(f"{pkg}.client").RocketMQClient
                clients[pkg] = cls(broker.endpoint, max_in_flight=IN_FLIGHT)
            clients["broker_core"].create_topic(TOPIC, queues=8)
            for client in clients.values():
                client.send_batch(TOPIC, batch)  # warm-up: asks whether SendBulk is offered
            samples: dict[str, list[tuple[float, float]]] = {pkg: [] for pkg in packages}
            for round_ in range(rounds):
                for pkg in packages[:: 1 if round_ % 2 else -1]:
                    samples[pkg].append(_round(clients[pkg], batches, batch))
        finally:
            for client in clients.values():
                client.close()
            broker.stop()
    out = {}
    for pkg, values in samples.items():
        cpu_us, rate = min(values)
        out[pkg] = {"client_cpu_us_per_msg": round(cpu_us, 3), "msg_s": round(rate)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--against", help="a git revision to measure alongside")
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.batches, args.against), indent=1))


if __name__ == "__main__":
    main()
