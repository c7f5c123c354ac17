"""``python -m bench.dedup_cost``: what idempotent sends (``broker/dedup.py``) cost.

Three figures, A/B in one run:

* **end to end**, ``bench produce``'s workload (our client's bulk sends of 256 messages
  of 128 B, ``IN_FLIGHT`` requests in flight) against one broker process with dedup on,
  to three topics in turn, rounds of ~0.1 s back to back (:func:`end_to_end`): one topic
  deduplicated (its window full first: ``--prefill`` messages), two switched off by
  their attribute ``dedup=false``. Printed, cycle by cycle against the first topic
  without dedup: what dedup adds to the broker's CPU per message and costs in msg/s
  (median, mean ± standard error), the same of the second topic without dedup (an A/A
  control: what the method reads where nothing differs), and the window's own CPU
  (``/metrics``) as a share of the broker's;
* **in process**, the broker's work on our client's SendBulk frames of 256 messages in
  one broker over a temporary store (no gRPC), to a deduplicated topic and one without
  in turn: the sending thread's CPU per message with and without dedup; and the window's own
  work alone (claim and settle of batches as SendBulk frames bring them: :func:`hook_us`)
  in each of its two lanes: the run lane (our client's batches: rising ids) and the
  dict lane (the same ids shuffled);
* **memory** of each lane: the window filled to ``--ids`` ids, bytes per id
  (``SendWindow.memory_bytes``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import shutil
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench import proc_cpu
from bench.produce import BATCH, BODY_BYTES, IN_FLIGHT
from bench.trace_cost import metrics_url
from broker_core.broker.broker import Broker
from broker_core.broker.dedup_window import SendWindow
from broker_core.broker.topics import TopicConfig
from broker_core.client import RocketMQClient
from broker_core.client.bulk import IdBlock, encode_bulk
from broker_core.client.message_ids import ID_BLOCKS
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.message import StoredMessage
from broker_core.protocol.bulk_send import decode_request
from broker_core.server.convert_bulk import Limits, to_column_batch
from broker_core.server.launcher import launch_broker

BODY = bytes(range(BODY_BYTES))
ON = {"dedup_window_ms": 120_000}  # the default
OFF = {"dedup_window_ms": 0}
# The sides: one topic deduplicated, two with attribute dedup=false (their pair is the A/A
# control: what the method reads where there is no difference).
SIDES = {"on": "bench-dedup", "off": "bench-nodedup", "off2": "bench-nodedup-2"}
ROUND_BATCHES = 50  # a round: 50 bulk sends of 256 (12,800 messages, ~0.1 s)


def _round(client: RocketMQClient, pid: int, topic: str, batches: int) -> tuple[float, float]:
    """(broker CPU seconds per message, msg/s) of ``batches`` bulk sends to ``topic``."""
    batch = [BODY] * BATCH
    cpu, start = proc_cpu.task_cpu_s(pid), time.perf_counter()
    for _ in range(batches):
        client.send_batch_async(topic, batch)
    client.flush()
    count = batches * BATCH
    return (proc_cpu.task_cpu_s(pid) - cpu) / count, count / (time.perf_counter() - start)


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


@dataclass
class EndToEnd:
    """Each side's rounds, (broker CPU s/msg, msg/s) each, in cycles of one round of each
    side; the window's own CPU per message of the on side, and the ids it held at the end."""

    rounds: dict[str, list[tuple[float, float]]]
    own: float
    held: int


def end_to_end(seconds: float, prefill: int) -> EndToEnd:
    """``bench produce``'s bulk sends against one broker with dedup on (its defaults: a
    120 s window of at most 1,000,000 ids), to three topics in turn, a round each, for
    ``seconds``: one deduplicated, two not (attribute ``dedup=false``). First
    ``prefill`` messages to the deduplicated one, so its window is full and every
    settle also evicts.

    Why so: drift of a shared host's speed over seconds is larger than the effect. Two
    broker processes read −14 % on an A/A probe; one broker switched live between rounds
    of seconds read from +7 % to +15 % across runs of the same code. Rounds of ~0.1 s
    back to back, the sides in one process at one time, pair up closely. CPU is summed
    over the broker's threads from ``/proc/<pid>/task/*/schedstat`` (nanoseconds; the
    tick-counted ``stat`` is too coarse for rounds this short)."""
    root = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    proc = launch_broker(
        root / "broker",
        config={
            "broker": {"default_queue_nums": 8, **ON},
            "store": {"segment_size_bytes": 256 << 20},
        },
        extra_args=["--metrics-listen", "127.0.0.1:0"],
    )
    rounds: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    try:
        url = metrics_url(proc)
        pid = proc.process.pid
        client = RocketMQClient(proc.endpoint, max_in_flight=IN_FLIGHT, timeout_s=120)
        for side, topic in SIDES.items():
            off = None if side == "on" else {"dedup": "false"}
            client.create_topic(topic, queues=8, attributes=off)
            _round(client, pid, topic, ROUND_BATCHES * 4)  # warm-up
        for _ in range(0, prefill, BATCH * ROUND_BATCHES):
            _round(client, pid, SIDES["on"], ROUND_BATCHES)
        _, own_before = _window(url)
        # Every order of the sides in turn: each side follows each other one as often
        # (a round can leave work or cold caches to the next; rotating only would let
        # one side follow the deduplicated one twice as often as the other)
        orders = itertools.cycle(itertools.permutations(SIDES))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for side in next(orders):
                rounds[side].append(_round(client, pid, SIDES[side], ROUND_BATCHES))
        held, own_after = _window(url)
        client.close()
    finally:
        proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    own = (own_after - own_before) / (len(rounds["on"]) * ROUND_BATCHES * BATCH)
    return EndToEnd(rounds, own, held)


def _paired(rounds: dict[str, list[tuple[float, float]]], side: str) -> str:
    """``side`` against off, cycle by cycle: added CPU and msg/s cost, median and mean ±
    standard error."""
    pairs = list(zip(rounds["off"], rounds[side], strict=True))
    cpu = [n[0] / o[0] - 1 for o, n in pairs]
    rate = [1 - n[1] / o[1] for o, n in pairs]

    def figure(values: list[float]) -> str:
        error = statistics.stdev(values) / math.sqrt(len(values))
        return (
            f"{100 * statistics.median(values):+.2f} % (mean {100 * statistics.fmean(values):+.2f}"
            f" ± {100 * error:.2f})"
        )

    return f"broker CPU {figure(cpu)}, msg/s {figure(rate)}"


def report(result: EndToEnd) -> str:
    """The on side's cost against off, the A/A control's, the window's own CPU."""
    rounds = result.rounds
    off_cpu = statistics.median(r[0] for r in rounds["off"])
    return (
        f"bench produce workload, one broker, {len(rounds['on'])} cycles of "
        f"{ROUND_BATCHES * BATCH:,} messages to each side: off {off_cpu * 1e6:.2f} us/msg, "
        f"{statistics.median(r[1] for r in rounds['off']):,.0f} msg/s; "
        f"dedup adds {_paired(rounds, 'on')}; A/A control (the other topic without dedup): "
        f"{_paired(rounds, 'off2')}; the window's own CPU {result.own * 1e6:.3f} us/msg = "
        f"{100 * result.own / off_cpu:.1f} % of off's; it held {result.held:,} ids at the end"
    )


def in_process(batches: int, rounds: int) -> tuple[float, float]:
    """(µs per message without dedup, with it) of the broker's work on our client's
    SendBulk frames of 256 messages (``to_column_batch`` and ``Sending.send_batch``, as
    the gRPC handler does them) in one broker over a temporary store, dedup on: the
    frames go to a deduplicated topic and to one with ``dedup=false`` in turn, each timed
    by the sending thread's CPU clock (not the flush thread's), summed per side."""
    root = Path(tempfile.mkdtemp(prefix="bench-dedup-inproc-"))
    store = StoreConfig(store_dir=str(root), segment_size_bytes=256 << 20)
    broker = Broker(
        BrokerConfig(default_queue_nums=8, dedup_window_ms=ON["dedup_window_ms"]), store
    )
    broker.start()
    limits = Limits(store.max_body_bytes, store.max_properties_bytes)
    topics = {"on": "bench", "off": "bench-nodedup"}
    broker.topics.create_or_update(TopicConfig(topics["off"], 8, 8, attributes={"dedup": "false"}))
    spent = {"on": 0.0, "off": 0.0}
    try:
        for number in range(rounds):
            made = [
                (side, encode_bulk(topics[side], [BODY] * BATCH)[0])
                for _ in range(batches)
                for side in ("on", "off")
            ]
            for side, frame in made:
                start = time.thread_time()
                request = decode_request(frame)
                now = int(time.time() * 1000)
                batch = to_column_batch(request, limits=limits, peer=("127.0.0.1", 1), now_ms=now)
                broker.sending.send_batch(batch)
                if number:  # the first round warms up
                    spent[side] += time.thread_time() - start
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    count = (rounds - 1) * batches * BATCH
    return spent["off"] / count * 1e6, spent["on"] / count * 1e6


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
    parser.add_argument("--seconds", type=float, default=180, help="how long the sides take turns")
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds")
    parser.add_argument(
        "--batches", type=int, default=1000, help="in process: a quarter of this a round"
    )
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument(
        "--prefill", type=int, default=1_100_000, help="messages sent before the rounds"
    )
    args = parser.parse_args()
    print(report(end_to_end(args.seconds, args.prefill)), flush=True)
    cpu_off, cpu_on = in_process(max(1, args.batches // 4), max(2, args.rounds))
    print(
        f"SendBulk frames in process (convert, send_batch): {cpu_off:.3f} us/msg off, "
        f"{cpu_on:.3f} us/msg on "
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
