"""latency: send → long-poll receive at a fixed rate, ours vs Redis XADD → XREADGROUP BLOCK.

Producer processes send single 128-byte messages at a target rate (full: 10,000 msg/s for
10 s; tiny: 1,000 msg/s for 1 s) — one request per message, as a latency-sensitive
application would. One synchronous sender waits a round trip per message, so the load is
spread over ``SENDERS`` (processes × sender threads; full: 4 × 4, 16 requests in flight,
enough for 10k msg/s while a round trip stays under 1.6 ms), each thread pacing its share
of the rate on its own schedule, phased so the sends interleave. When they cannot keep up
they send back to back and the achieved rate is recorded. Redis is then driven at the rate
our side achieved (at most the target), so both systems carry the same load; its own
achieved rate is recorded too.

First, in the same run, the ceiling of single unary calls on this machine is measured
(:mod:`bench.echo_ceiling`): a grpcio server that does nothing, in its own process, called
back to back by the same sender processes and threads. No grpcio broker can take more
single-message requests than that, so when the ceiling is below the target our senders
are offered the ceiling's rate instead (``details["offered_msg_s"]`` and
``details["offered_because"]`` say so), and the report shows how far the target is from
what grpcio itself does here (``details["echo_ceiling_calls_s"]`` and
``details["echo_ceiling_ms"]``, its round trips' p50/p99/p999).

Each body starts with the message's sequence number and the sender's
``time.monotonic_ns()`` taken just before the send call (system-wide on Linux, so it
compares across processes); the consumer, in the bench process, subtracts it from its
own clock once the message is in hand. Stamping the send time rather than the scheduled
time measures the messaging system, not a producer that fell behind its schedule. Each
producer process ends with a marker message once its threads are done; the consumer stops
after the last process's marker.

* ours: a topic with one queue; ``RocketMQClient.send`` (one SendMessage per message),
  consumer ``RocketMQClient.pull_raw`` (the bulk pull; units verified and decoded as
  columns) with ``long_polling_timeout_ms`` from its offset. The PullMessage stream (one
  response per message) costs the consumer about 1 ms a message on this machine, so at
  1,000 msg/s a backlog builds up and latency is the backlog's age, not the wake-up's.
* ours, coalesced: the same with clients made ``coalesce=True`` (the sends that a
  process's threads make while one of its requests is in flight share the next request,
  ``client/coalesce.py``), on a fresh broker; reported beside the headline figure
  (``details["coalesced_ms"]``, ``details["coalesced_achieved_msg_s"]``).
* Redis: ``XADD`` per message; consumer ``XREADGROUP … BLOCK 1000 NOACK`` (NOACK: like
  our offset pull it keeps no per-message delivery state).

Result semantics (lower is better): ``ours`` and ``baseline`` are the p99 latencies in
ms, ``ratio`` is ours / Redis (below 1: we are faster) and the goal is absolute: our p99
≤ 2 ms (``goal_on = "ours"``; also ``details["goal_ms"]``). p50/p99/p999 of both sides
and the achieved send rates are in ``details``.
"""

from __future__ import annotations

import multiprocessing
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench import echo_ceiling
from bench.peers import redis_client, start_redis
from bench.report import Result, percentiles_ms
from broker_core.client import RocketMQClient
from broker_core.client.columnar import decode_units
from broker_core.server.launcher import launch_broker

BODY_BYTES = 128
STAMP = struct.Struct("<qq")  # sequence number (or a marker below), send time (monotonic ns)
WARM_UP, END = -1, -2
TOPIC = "bench-latency"
GROUP = "GID_bench_latency"
GOAL_MS = 2.0
POLL_MS = 1_000
MAX_BATCH = 1_024
SIZES = {"tiny": (1_000, 1.0), "full": (10_000, 10.0)}  # (target msg/s, seconds)
# (producer processes, sender threads in each): 16 synchronous senders in flight reach
# 10,000 msg/s as long as a send's round trip stays under 1.6 ms.
SENDERS = {"tiny": (2, 2), "full": (4, 4)}


def _body(seq: int) -> bytes:
    return STAMP.pack(seq, time.monotonic_ns()).ljust(BODY_BYTES, b"\0")


def _pace(send: Callable[[bytes], Any], rate: float, seconds: float, phase: float) -> int:
    """Send stamped messages at ``rate`` per second for ``seconds``; how many were sent.

    ``phase`` (0..1) shifts this sender's schedule by that fraction of its interval.
    """
    interval_ns = 1e9 / rate
    start = time.monotonic_ns() + int(phase * interval_ns)
    stop = start + int(seconds * 1e9)
    seq = 0
    while (now := time.monotonic_ns()) < stop:
        wait_ns = start + int(seq * interval_ns) - now
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        send(_body(seq))
        seq += 1
    return seq


def _threads(
    send: Callable[[bytes], Any],
    rate: float,
    seconds: float,
    threads: int,
    first_phase: float,
    phase_step: float,
) -> float:
    """Run ``threads`` pacing senders sharing ``rate``; their achieved msg/s together.

    A warm-up message goes first (the connection is set up before the clock starts) and
    the end marker last, once every thread is done.
    """
    send(_body(WARM_UP))
    counts = [0] * threads

    def sender(i: int) -> None:
        counts[i] = _pace(send, rate / threads, seconds, first_phase + i * phase_step)

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    achieved = sum(counts) / (time.monotonic() - started)
    send(_body(END))
    return achieved


def _producer(
    kind: str,
    address: str,
    rate: float,
    seconds: float,
    threads: int,
    index: int,
    processes: int,
    out: Connection,
) -> None:
    """Child process: ``threads`` paced senders to our broker or Redis; reports msg/s."""
    step = 1 / (threads * processes)  # phases spread over all senders of all processes
    if kind.startswith("ours"):
        with RocketMQClient(address, coalesce=kind == "ours-coalesced") as client:
            out.send(
                _threads(
                    lambda body: client.send(TOPIC, body),
                    rate,
                    seconds,
                    threads,
                    index * step,
                    processes * step,
                )
            )
    else:
        conn = redis_client(int(address), max_connections=threads + 1)
        out.send(
            _threads(
                lambda body: conn.xadd(TOPIC, {"b": body}),
                rate,
                seconds,
                threads,
                index * step,
                processes * step,
            )
        )
        conn.close()


def _collect(receive: Callable[[], list[bytes]], seconds: float, producers: list[Any]) -> list[int]:
    """Latencies (ns) of the stamped messages read with ``receive``, up to the last end
    marker (one per producer process)."""
    latencies: list[int] = []
    ends = 0
    deadline = time.monotonic() + seconds + 120
    while True:
        codes = [p.exitcode for p in producers]
        if time.monotonic() > deadline or any(code not in (None, 0) for code in codes):
            raise RuntimeError(
                f"no end markers after {len(latencies)} messages (producer exit codes {codes})"
            )
        bodies = receive()
        now = time.monotonic_ns()
        for body in bodies:
            seq, sent_ns = STAMP.unpack_from(body)
            if seq >= 0:
                latencies.append(now - sent_ns)
            elif seq == END:
                ends += 1
        if ends == len(producers):
            return latencies


def _measure(
    kind: str,
    address: str,
    receive: Callable[[], list[bytes]],
    rate: float,
    seconds: float,
    senders: tuple[int, int],
) -> tuple[list[int], float]:
    """Run the producer processes against ``receive``; (latencies ns, achieved msg/s)."""
    processes, threads = senders
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe(duplex=False) for _ in range(processes)]
    producers = [
        context.Process(
            target=_producer,
            args=(kind, address, rate / processes, seconds, threads, i, processes, tx),
        )
        for i, (_rx, tx) in enumerate(pipes)
    ]
    for producer in producers:
        producer.start()
    try:
        latencies = _collect(receive, seconds, producers)
        achieved = sum(float(rx.recv()) for rx, _tx in pipes)
    finally:
        echo_ceiling.join_or_kill(producers)
    return latencies, achieved


def _ours(
    workdir: Path, rate: float, seconds: float, senders: tuple[int, int], kind: str = "ours"
) -> tuple[list[int], float]:
    """Our broker under ``kind`` senders ("ours", or "ours-coalesced": clients made with
    ``coalesce=True``); (latencies ns, achieved msg/s)."""
    broker = launch_broker(workdir, config={"store": {"segment_size_bytes": 64 << 20}})
    try:
        with RocketMQClient(broker.endpoint) as client:
            client.create_topic(TOPIC, queues=1)
            offset = 0

            def receive() -> list[bytes]:
                nonlocal offset
                batch = client.pull_raw(
                    GROUP, TOPIC, 0, offset, MAX_BATCH, long_polling_timeout_ms=POLL_MS
                )
                offset = batch.next_offset
                return decode_units(batch.data, batch.sizes).body.to_pylist()

            return _measure(kind, broker.endpoint, receive, rate, seconds, senders)
    finally:
        broker.stop()


def _redis(
    workdir: Path, rate: float, seconds: float, senders: tuple[int, int]
) -> tuple[list[int], float]:
    peer = start_redis(workdir)
    try:
        conn = redis_client(peer.port)
        conn.xgroup_create(TOPIC, "bench", id="0", mkstream=True)

        def receive() -> list[bytes]:
            answer: Any = conn.xreadgroup(
                "bench", "c1", {TOPIC: ">"}, count=MAX_BATCH, block=POLL_MS, noack=True
            )
            return [fields[b"b"] for _, fields in answer[0][1]] if answer else []

        try:
            return _measure("redis", str(peer.port), receive, rate, seconds, senders)
        finally:
            conn.close()
    finally:
        peer.stop()


def _offer(rate: float, ceiling: echo_ceiling.Ceiling) -> tuple[float, str]:
    """The rate our senders are offered (the target, or grpcio's ceiling below it), and why."""
    if ceiling.calls_s >= rate:
        return rate, "target"
    return (
        ceiling.calls_s,
        f"grpcio echo ceiling {ceiling.calls_s:,.0f} calls/s is below the target",
    )


def run(size: str) -> list[Result]:
    rate, seconds = SIZES[size]
    senders = SENDERS[size]
    ceiling = echo_ceiling.measure(seconds, senders, BODY_BYTES)
    offered, because = _offer(rate, ceiling)
    root = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    try:
        ours_ns, ours_rate = _ours(root / "ours", offered, seconds, senders)
        merged_ns, merged_rate = _ours(root / "merged", offered, seconds, senders, "ours-coalesced")
        # Redis gets the load we managed to offer, so both sides carry the same traffic.
        redis_target = min(rate, ours_rate)
        redis_ns, redis_rate = _redis(root / "redis", redis_target, seconds, senders)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours, theirs, merged = (percentiles_ms(ns) for ns in (ours_ns, redis_ns, merged_ns))
    result = Result(
        "latency",
        ours["p99"],
        theirs["p99"],
        "ms",
        goal=GOAL_MS,
        higher_is_better=False,
        goal_on="ours",
        baseline_name="Redis XREADGROUP",
        details={
            "goal_ms": GOAL_MS,
            "seconds": seconds,
            "body_bytes": BODY_BYTES,
            "messages": [len(ours_ns), len(redis_ns)],
            "target_msg_s": rate,
            "echo_ceiling_calls_s": round(ceiling.calls_s),
            "echo_ceiling_ms": ceiling.round_trip_ms,
            "offered_msg_s": round(offered),
            "offered_because": because,
            "ours_achieved_msg_s": round(ours_rate),
            "redis_target_msg_s": round(redis_target),
            "redis_achieved_msg_s": round(redis_rate),
            "ours_ms": ours,
            "redis_ms": theirs,
            "coalesced_achieved_msg_s": round(merged_rate),
            "coalesced_ms": merged,
            "long_poll_ms": POLL_MS,
            "sender_processes": senders[0],
            "sender_threads_each": senders[1],
        },
    )
    result.rows = [
        (f"ours {name}", f"{ours[name]:.3f} ms", f"Redis {theirs[name]:.3f} ms")
        for name in ("p50", "p99", "p999")
    ]
    result.rows += [
        (
            "send rate achieved",
            f"{ours_rate:,.0f} msg/s",
            f"offered {offered:,.0f} of target {rate:,.0f}; Redis {redis_rate:,.0f}",
        ),
        (
            "grpcio echo ceiling",
            f"{ceiling.calls_s:,.0f} calls/s",
            f"round trip p99 {ceiling.round_trip_ms['p99']:.3f} ms",
        ),
        (
            "ours, sends coalesced",
            f"p99 {merged['p99']:.3f} ms",
            f"p50 {merged['p50']:.3f} ms at {merged_rate:,.0f} msg/s",
        ),
    ]
    return [result]
