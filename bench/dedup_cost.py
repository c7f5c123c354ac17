"""``python -m bench.dedup_cost``: what idempotent sends (``broker/dedup.py``) cost.

Three figures, A/B in one run:

* **end to end**, ``bench produce``'s workload (our client's bulk sends of 256 messages
  of 128 B, ``IN_FLIGHT`` requests in flight) against two broker processes, one with the
  dedup window (the default) and one with ``dedup_window_ms = 0``, each first sent
  ``--prefill`` messages (the window full: every settle also evicts); rounds alternate
  between them (and which goes first) so drift of the shared machine hits both alike.
  Printed: the median msg/s of each side and of the paired on/off ratios (noise on a
  loaded machine), and the load-proof figure: the broker process's CPU per message
  (``/proc``) on each side and what dedup adds, of the broker's CPU and of broker + client;
* **in process**, ``Sending.send_columns`` of 256-message column batches on two brokers
  over temporary stores (no gRPC), alternating: the sending thread's CPU per message with
  and without the window (best of the rounds: the least disturbed), and the window's own
  work alone (keys, claim, settle of the same batches: :func:`hook_us`);
* **memory**: the window filled to ``--ids`` ids, bytes per id (``SendWindow.memory_bytes``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench import proc_cpu
from bench.produce import BATCH, BODY_BYTES, IN_FLIGHT
from broker_core.broker.broker import Broker
from broker_core.broker.dedup_window import SendWindow
from broker_core.client import RocketMQClient
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.message import Message, StoredMessage
from broker_core.server.launcher import launch_broker
from broker_core.store.columns import encode_messages

BODY = bytes(range(BODY_BYTES))
ON = {"dedup_window_ms": 120_000}
OFF = {"dedup_window_ms": 0}


def _round(client: RocketMQClient, pid: int, batches: int) -> proc_cpu.Round:
    batch = [BODY] * BATCH
    with proc_cpu.Round(pid) as r:
        for _ in range(batches):
            client.send_batch_async("bench-dedup", batch)
        client.flush()
        r.done(batches * BATCH)
    return r


def end_to_end(batches: int, rounds: int, prefill: int) -> dict[str, list[proc_cpu.Round]]:
    """Each side's rounds of bulk sends (rate, broker and client CPU per message), after
    ``prefill`` messages (not timed) that bring the window to its steady state: full, so
    that every settle also evicts."""
    root = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    sides = {
        name: launch_broker(root / name, config={"broker": {"default_queue_nums": 8, **extra}})
        for name, extra in (("off", OFF), ("on", ON))
    }
    runs: dict[str, list[proc_cpu.Round]] = {"off": [], "on": []}
    try:
        clients = {n: RocketMQClient(p.endpoint, max_in_flight=IN_FLIGHT) for n, p in sides.items()}
        for name, client in clients.items():
            client.create_topic("bench-dedup", queues=8)
            _round(client, sides[name].process.pid, max(1, batches // 10))  # warm-up
            for _ in range(0, prefill, BATCH * IN_FLIGHT * 8):
                for _ in range(IN_FLIGHT * 8):
                    client.send_batch_async("bench-dedup", [BODY] * BATCH)
                client.flush()
        for number in range(rounds):
            order = ["off", "on"] if number % 2 else ["on", "off"]
            for name in order:
                runs[name].append(_round(clients[name], sides[name].process.pid, batches))
        for client in clients.values():
            client.close()
    finally:
        for proc in sides.values():
            proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    return runs


def report(runs: dict[str, list[proc_cpu.Round]]) -> str:
    """Medians: msg/s of each side and the paired on/off cost; the broker's CPU per
    message of each side and what dedup adds, of the broker's and of broker + client."""
    off, on = runs["off"], runs["on"]
    pairs = list(zip(off, on, strict=True))
    paired = statistics.median(1 - n.rate / o.rate for o, n in pairs)
    added = [n.broker_cpu - o.broker_cpu for o, n in pairs]
    of_broker = statistics.median(a / o.broker_cpu for a, (o, _) in zip(added, pairs, strict=True))
    of_all = statistics.median(
        a / (o.broker_cpu + o.client_cpu) for a, (o, _) in zip(added, pairs, strict=True)
    )
    return (
        f"bench produce workload: dedup off {statistics.median(r.rate for r in off):,.0f} msg/s, "
        f"on {statistics.median(r.rate for r in on):,.0f} msg/s, paired cost {100 * paired:+.2f} %;"
        f" broker CPU off {statistics.median(r.broker_cpu for r in off) * 1e6:.2f} us/msg, on "
        f"{statistics.median(r.broker_cpu for r in on) * 1e6:.2f}: dedup adds "
        f"{statistics.median(added) * 1e6:+.2f} us/msg, {100 * of_broker:+.1f} % of the broker's "
        f"CPU, {100 * of_all:+.1f} % of broker + client"
    )


def in_process(batches: int, rounds: int) -> tuple[float, float]:
    """(best µs per message without the window, with it) of ``Sending.send_columns``."""
    root = Path(tempfile.mkdtemp(prefix="bench-dedup-inproc-"))
    brokers = {}
    for name, extra in (("off", OFF), ("on", ON)):
        store = StoreConfig(store_dir=str(root / name), segment_size_bytes=256 << 20)
        config = BrokerConfig(default_queue_nums=8, dedup_window_ms=extra["dedup_window_ms"])
        brokers[name] = Broker(config, store)
        brokers[name].start()
    best = {"off": float("inf"), "on": float("inf")}
    serial = 0
    try:
        for _ in range(rounds):
            for name, broker in brokers.items():
                made = []
                for _ in range(batches):
                    ids = [{"UNIQ_KEY": f"B{serial + i:020d}"} for i in range(BATCH)]
                    serial += BATCH
                    made.append(
                        encode_messages(
                            [Message("bench", BODY, -1, p) for p in ids],
                            max_body_bytes=1024,
                            max_properties_bytes=1024,
                        )
                    )
                start = time.thread_time()  # this thread's CPU: not the flush thread's
                for batch in made:
                    broker.sending.send_columns(batch)
                spent = (time.thread_time() - start) / (batches * BATCH) * 1e6
                best[name] = min(best[name], spent)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return best["off"], best["on"]


def _no_unit(offset: int) -> StoredMessage:
    raise AssertionError(f"no repeat is looked up here (offset {offset})")


def hook_us(batches: int, rounds: int) -> float:
    """Best CPU µs per message of the window's work for 256-message batches of new ids:
    ``column_keys``, ``claim`` and ``settle``, as ``DedupSender.send_columns`` does them,
    with the window full (1,000,000 ids: each settle also evicts)."""
    window = SendWindow(
        window_ms=600_000, max_ids=1_000_000, read_unit=_no_unit, clock_ms=lambda: 1
    )
    best, serial = float("inf"), 0
    while serial < window.max_ids * 5 // 4:  # steady state: full, settles evict
        keys = window.column_keys("bench", [[f"F{serial + i:020d}"] for i in range(BATCH)])
        assert keys is not None
        window.settle(window.claim(keys), range(BATCH))
        serial += BATCH
    for _ in range(rounds):
        made = []
        for _ in range(batches):
            made.append([[f"H{serial + i:020d}"] for i in range(BATCH)])
            serial += BATCH
        start = time.thread_time()
        for index_keys in made:
            keys = window.column_keys("bench", index_keys)
            assert keys is not None
            window.settle(window.claim(keys), range(BATCH))
        best = min(best, (time.thread_time() - start) / (batches * BATCH) * 1e6)
    return best


def memory_per_id(ids: int) -> float:
    """Bytes per id of a window holding ``ids`` ids (keys settled 256 at a time)."""
    window = SendWindow(window_ms=600_000, max_ids=ids, read_unit=_no_unit, clock_ms=lambda: 1)
    for first in range(0, ids, BATCH):
        keys = window.column_keys("bench", [[f"M{i:020d}"] for i in range(first, first + BATCH)])
        assert keys is not None
        claim = window.claim(keys)
        window.settle(claim, list(range(first, first + BATCH)))
    return window.memory_bytes() / window.size()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument(
        "--prefill", type=int, default=1_100_000, help="messages sent before the rounds"
    )
    args = parser.parse_args()
    print(report(end_to_end(args.batches, args.rounds, args.prefill)), flush=True)
    cpu_off, cpu_on = in_process(max(1, args.batches // 4), args.rounds)
    print(
        f"send_columns in process: {cpu_off:.3f} us/msg off, {cpu_on:.3f} us/msg on "
        f"({cpu_on - cpu_off:+.3f} us, {100 * (cpu_on / cpu_off - 1):+.2f} %)",
        flush=True,
    )
    hook = hook_us(max(1, args.batches // 4), args.rounds * 3)
    print(f"the window's own work: {hook:.3f} us/msg ({100 * hook / cpu_off:.2f} % of off)")
    print(f"memory: {memory_per_id(args.ids):.0f} bytes per id at {args.ids:,} ids", flush=True)


if __name__ == "__main__":
    main()
