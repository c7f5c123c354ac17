"""``python -m bench.dedup_cost``: what idempotent sends (``broker/dedup.py``) cost.

Three figures, A/B in one run:

* **end to end**, ``bench produce``'s workload (our client's bulk sends of 256 messages
  of 128 B, ``IN_FLIGHT`` requests in flight) against one broker process, first sent
  ``--prefill`` messages, whose ``dedup_window_ms`` is set live (``UpdateBrokerConfig``)
  before each round: off (0) or on (:data:`LIVE_WINDOW_MS`; switching it on rebuilds the
  window from the log, so it is full and every settle also evicts). The sides alternate
  (and which goes first) so drift of the shared machine hits both alike; one process,
  because on two cores two broker processes differ from each other by more than the
  effect measured (an A/A run of the former two-process form read ±14 %). Printed: the
  median msg/s of each side and of the paired on/off ratios, and the broker process's
  CPU per message (``/proc``) on each side and what dedup adds, of the broker's CPU
  (median, mean ± standard error) and of broker + client;
* **in process**, ``Sending.send_columns`` of 256-message column batches on two brokers
  over temporary stores (no gRPC), alternating: the sending thread's CPU per message with
  and without the window (best of the rounds: the least disturbed), and the window's own
  work alone (claim and settle of batches as SendBulk frames bring them: :func:`hook_us`)
  in each of its two lanes: the run lane (our client's batches: rising ids) and the
  dict lane (the same ids shuffled);
* **memory** of each lane: the window filled to ``--ids`` ids, bytes per id
  (``SendWindow.memory_bytes``).
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench import proc_cpu
from bench.produce import BATCH, BODY_BYTES, IN_FLIGHT
from bench.trace_cost import metrics_url
from broker_core.broker.broker import Broker
from broker_core.broker.dedup_window import SendWindow
from broker_core.client import RocketMQClient
from broker_core.client.bulk import IdBlock
from broker_core.client.message_ids import ID_BLOCKS
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.message import Message, StoredMessage
from broker_core.server.launcher import launch_broker
from broker_core.store.columns import encode_messages

BODY = bytes(range(BODY_BYTES))
ON = {"dedup_window_ms": 120_000}
OFF = {"dedup_window_ms": 0}
# The end-to-end on side's window: at bench produce's rate its count bound (the default
# 1,000,000 ids) is reached first, as with the default 120 s, while switching it on
# rebuilds only 10 s of log (the default's would rescan two minutes of sends each round).
LIVE_WINDOW_MS = 10_000


def _round(client: RocketMQClient, pid: int, batches: int) -> proc_cpu.Round:
    batch = [BODY] * BATCH
    with proc_cpu.Round(pid) as r:
        for _ in range(batches):
            client.send_batch_async("bench-dedup", batch)
        client.flush()
        r.done(batches * BATCH)
    return r


def _window(url: str) -> tuple[int, float]:
    """(``rocketmq_dedup_ids``, ``rocketmq_dedup_cpu_seconds_total``) of the broker now."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    found = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return int(found["rocketmq_dedup_ids"]), found["rocketmq_dedup_cpu_seconds_total"]


def end_to_end(
    batches: int, rounds: int, prefill: int
) -> tuple[dict[str, list[proc_cpu.Round]], list[int], list[float]]:
    """Each side's rounds of bulk sends (rate, broker and client CPU per message) against
    one broker whose ``dedup_window_ms`` is set live before each round (on: rebuilt from
    the log, so full), after ``prefill`` messages (not timed); the ids the window held
    after each on round (so a side that held nothing cannot pass as cheap); and the
    window's own CPU per message in each on round (``/metrics``)."""
    root = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    proc = launch_broker(
        root / "broker",
        config={
            "broker": {"default_queue_nums": 8, **OFF},
            "store": {"segment_size_bytes": 256 << 20},
        },
        extra_args=["--metrics-listen", "127.0.0.1:0"],
    )
    runs: dict[str, list[proc_cpu.Round]] = {"off": [], "on": []}
    held: list[int] = []
    own: list[float] = []
    try:
        url = metrics_url(proc)
        client = RocketMQClient(proc.endpoint, max_in_flight=IN_FLIGHT, timeout_s=120)
        client.create_topic("bench-dedup", queues=8)
        _round(client, proc.process.pid, max(1, batches // 10))  # warm-up
        for _ in range(0, prefill, BATCH * IN_FLIGHT * 8):
            for _ in range(IN_FLIGHT * 8):
                client.send_batch_async("bench-dedup", [BODY] * BATCH)
            client.flush()
        for number in range(rounds):
            for name in ["off", "on"] if number % 2 else ["on", "off"]:
                client.update_broker_config("dedup_window_ms", LIVE_WINDOW_MS * (name == "on"))
                _, cpu_before = _window(url)
                runs[name].append(_round(client, proc.process.pid, batches))
                if name == "on":
                    ids, cpu_after = _window(url)
                    held.append(ids)
                    own.append((cpu_after - cpu_before) / (batches * BATCH))
        client.close()
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    return runs, held, own


def report(runs: dict[str, list[proc_cpu.Round]], held: list[int], own: list[float]) -> str:
    """Medians: msg/s of each side and the paired on/off cost; the broker's CPU per
    message of each side and what dedup adds (median, and mean ± its standard error), of
    the broker's and of broker + client; the window's own CPU per message (the direct
    figure, which the rounds' spread does not blur) as a share of off's broker CPU; the
    ids the window held."""
    off, on = runs["off"], runs["on"]
    pairs = list(zip(off, on, strict=True))
    paired = statistics.median(1 - n.rate / o.rate for o, n in pairs)
    added = [n.broker_cpu - o.broker_cpu for o, n in pairs]
    shares = [a / o.broker_cpu for a, (o, _) in zip(added, pairs, strict=True)]
    error = statistics.stdev(shares) / math.sqrt(len(shares)) if len(shares) > 1 else math.nan
    of_all = statistics.median(
        a / (o.broker_cpu + o.client_cpu) for a, (o, _) in zip(added, pairs, strict=True)
    )
    return (
        f"bench produce workload, one broker, dedup switched live: off "
        f"{statistics.median(r.rate for r in off):,.0f} msg/s, on "
        f"{statistics.median(r.rate for r in on):,.0f} msg/s, paired cost {100 * paired:+.2f} %;"
        f" broker CPU off {statistics.median(r.broker_cpu for r in off) * 1e6:.2f} us/msg, on "
        f"{statistics.median(r.broker_cpu for r in on) * 1e6:.2f}: dedup adds "
        f"{statistics.median(added) * 1e6:+.2f} us/msg, {100 * statistics.median(shares):+.1f} %"
        f" of the broker's CPU (mean {100 * statistics.fmean(shares):+.1f} ± {100 * error:.1f}),"
        f" {100 * of_all:+.1f} % of broker + client; the window's own CPU "
        f"{statistics.median(own) * 1e6:.3f} us/msg = "
        f"{100 * statistics.median(own) / statistics.median(o.broker_cpu for o in off):.1f} % "
        f"of off's; the window held {min(held):,}-{max(held):,} ids after the on rounds"
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
    try:
        for _ in range(rounds):
            for name, broker in brokers.items():
                made = []
                for _ in range(batches):
                    ids = [{"UNIQ_KEY": uniq} for uniq in client_ids(BATCH)]
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


def client_ids(count: int) -> list[str]:
    """A batch's ids as our client numbers them (``ID_BLOCKS``: one prefix a batch)."""
    prefix, first = ID_BLOCKS.reserve(count)
    return IdBlock(prefix.decode(), first, count).strings()


def _client_batch(shuffled: bool) -> tuple[list[list[str]], str | None]:
    """A column batch's index keys and id text as our client's SendBulk frames bring them
    (``shuffled``: the same ids out of order, no span: the dict lane)."""
    ids = client_ids(BATCH)
    if shuffled:
        random.shuffle(ids)
        return [[u] for u in ids], None
    return [[u] for u in ids], "".join(f"UNIQ_KEY\x01{u}\x02" for u in ids)


def hook_us(batches: int, rounds: int, *, shuffled: bool = False) -> float:
    """Best CPU µs per message of the window's work for 256-message batches of new ids:
    ``claim_columns`` and ``settle``, as ``DedupSender.send_columns`` does them,
    with the window full (1,000,000 ids: each settle also evicts). Our client's ids
    (the run lane), or ``shuffled`` (the dict lane)."""
    window = SendWindow(
        window_ms=600_000, max_ids=1_000_000, read_unit=_no_unit, clock_ms=lambda: 1
    )
    best, offsets = float("inf"), np.arange(BATCH)
    for _ in range(window.max_ids * 5 // 4 // BATCH):  # steady state: full, settles evict
        claim = window.claim_columns("bench", *_client_batch(shuffled))
        assert claim is not None
        window.settle(claim, offsets)
    for _ in range(rounds):
        made = [_client_batch(shuffled) for _ in range(batches)]
        start = time.thread_time()
        for index_keys, id_text in made:
            claim = window.claim_columns("bench", index_keys, id_text)
            assert claim is not None
            window.settle(claim, offsets)
        best = min(best, (time.thread_time() - start) / (batches * BATCH) * 1e6)
    return best


def memory_per_id(ids: int, *, shuffled: bool = False) -> float:
    """Bytes per id of a window holding ``ids`` ids (settled 256 at a time)."""
    window = SendWindow(window_ms=600_000, max_ids=ids, read_unit=_no_unit, clock_ms=lambda: 1)
    for first in range(0, ids, BATCH):
        claim = window.claim_columns("bench", *_client_batch(shuffled))
        assert claim is not None
        window.settle(claim, np.arange(first, first + BATCH))
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
    print(report(*end_to_end(args.batches, args.rounds, args.prefill)), flush=True)
    cpu_off, cpu_on = in_process(max(1, args.batches // 4), args.rounds)
    print(
        f"send_columns in process: {cpu_off:.3f} us/msg off, {cpu_on:.3f} us/msg on "
        f"({cpu_on - cpu_off:+.3f} us, {100 * (cpu_on / cpu_off - 1):+.2f} %)",
        flush=True,
    )
    for lane, shuffled in (("run lane (our client's batches)", False), ("dict lane", True)):
        hook = hook_us(max(1, args.batches // 4), args.rounds * 3, shuffled=shuffled)
        print(
            f"the window's own work, {lane}: {hook:.3f} us/msg ({100 * hook / cpu_off:.2f} % "
            f"of off); memory {memory_per_id(args.ids, shuffled=shuffled):.0f} bytes per id "
            f"at {args.ids:,} ids",
            flush=True,
        )


if __name__ == "__main__":
    main()
