"""latency: send → long-poll receive at a fixed rate, ours vs Redis XADD → XREADGROUP BLOCK.

A producer process sends single 128-byte messages at a target rate (full: 10,000 msg/s for
10 s; tiny: 1,000 msg/s for 1 s) — one request per message, as a latency-sensitive
application would. When Python cannot keep up it sends back to back and the achieved
rate is recorded. Redis is then driven at the rate our side achieved (at most the
target), so both systems carry the same load; its own achieved rate is recorded too.

Each body starts with the message's sequence number and the sender's
``time.monotonic_ns()`` taken just before the send call (system-wide on Linux, so it
compares across processes); the consumer, in the bench process, subtracts it from its
own clock once the message is in hand. Stamping the send time rather than the scheduled
time measures the messaging system, not a producer that fell behind its schedule. The
producer ends with a marker message, which tells the consumer to stop.

* ours: a topic with one queue; ``RocketMQClient.send`` (one SendMessage per message),
  consumer ``RocketMQClient.pull`` with ``long_polling_timeout_ms`` from its offset.
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
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.peers import start_redis
from bench.report import Result, percentiles_ms
from broker_core.client import RocketMQClient
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


def _body(seq: int) -> bytes:
    return STAMP.pack(seq, time.monotonic_ns()).ljust(BODY_BYTES, b"\0")


def _pace(send: Callable[[bytes], Any], rate: float, seconds: float) -> float:
    """Send stamped messages at ``rate`` per second for ``seconds``; the achieved rate.

    A warm-up message goes first (the connection is set up before the clock starts) and
    an end marker last, so the consumer knows when to stop.
    """
    send(_body(WARM_UP))
    interval_ns = 1e9 / rate
    start = time.monotonic_ns()
    stop = start + int(seconds * 1e9)
    seq = 0
    while (now := time.monotonic_ns()) < stop:
        wait_ns = start + int(seq * interval_ns) - now
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        send(_body(seq))
        seq += 1
    achieved = seq / ((time.monotonic_ns() - start) / 1e9)
    send(_body(END))
    return achieved


def _producer(kind: str, address: str, rate: float, seconds: float, out: Connection) -> None:
    """Child process: pace sends to our broker or Redis; report the achieved rate."""
    if kind == "ours":
        with RocketMQClient(address) as client:
            out.send(_pace(lambda body: client.send(TOPIC, body), rate, seconds))
    else:
        import redis

        conn = redis.Redis(host="127.0.0.1", port=int(address))
        out.send(_pace(lambda body: conn.xadd(TOPIC, {"b": body}), rate, seconds))
        conn.close()


def _collect(receive: Callable[[], list[bytes]], seconds: float, producer: Any) -> list[int]:
    """Latencies (ns) of the stamped messages read with ``receive``, up to the end marker."""
    latencies: list[int] = []
    deadline = time.monotonic() + seconds + 120
    while True:
        if time.monotonic() > deadline or producer.exitcode not in (None, 0):
            raise RuntimeError(f"no end marker after {len(latencies)} messages "
                               f"(producer exit code {producer.exitcode})")  # fmt: skip
        bodies = receive()
        now = time.monotonic_ns()
        for body in bodies:
            seq, sent_ns = STAMP.unpack_from(body)
            if seq == END:
                return latencies
            if seq >= 0:
                latencies.append(now - sent_ns)


def _measure(kind: str, address: str, receive: Callable[[], list[bytes]], rate: float,
             seconds: float) -> tuple[list[int], float]:  # fmt: skip
    """Run the producer process against ``receive``; (latencies ns, achieved msg/s)."""
    context = multiprocessing.get_context("spawn")
    ours_end, theirs = context.Pipe(duplex=False)
    producer = context.Process(target=_producer, args=(kind, address, rate, seconds, theirs))
    producer.start()
    try:
        latencies = _collect(receive, seconds, producer)
        achieved = float(ours_end.recv())
        producer.join(30)
    finally:
        if producer.is_alive():
            producer.kill()
            producer.join()
    return latencies, achieved


def _ours(workdir: Path, rate: float, seconds: float) -> tuple[list[int], float]:
    broker = launch_broker(workdir, config={"store": {"segment_size_bytes": 64 << 20}})
    try:
        with RocketMQClient(broker.endpoint) as client:
            client.create_topic(TOPIC, queues=1)
            offset = 0

            def receive() -> list[bytes]:
                nonlocal offset
                batch = client.pull(GROUP, TOPIC, 0, offset, MAX_BATCH,
                                    long_polling_timeout_ms=POLL_MS, with_bounds=False)  # fmt: skip
                offset = batch.next_offset
                return [m.body for m in batch.messages]

            return _measure("ours", broker.endpoint, receive, rate, seconds)
    finally:
        broker.stop()


def _redis(workdir: Path, rate: float, seconds: float) -> tuple[list[int], float]:
    import redis

    peer = start_redis(workdir)
    try:
        conn = redis.Redis(host="127.0.0.1", port=peer.port)
        conn.xgroup_create(TOPIC, "bench", id="0", mkstream=True)

        def receive() -> list[bytes]:
            answer: Any = conn.xreadgroup("bench", "c1", {TOPIC: ">"}, count=MAX_BATCH,
                                          block=POLL_MS, noack=True)  # fmt: skip
            return [fields[b"b"] for _, fields in answer[0][1]] if answer else []

        try:
            return _measure("redis", str(peer.port), receive, rate, seconds)
        finally:
            conn.close()
    finally:
        peer.stop()


def run(size: str) -> list[Result]:
    rate, seconds = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    try:
        ours_ns, ours_rate = _ours(root / "ours", rate, seconds)
        # Redis gets the load we managed to offer, so both sides carry the same traffic.
        redis_target = min(rate, ours_rate)
        redis_ns, redis_rate = _redis(root / "redis", redis_target, seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours, theirs = percentiles_ms(ours_ns), percentiles_ms(redis_ns)
    result = Result("latency", ours["p99"], theirs["p99"], "ms", goal=GOAL_MS,
                    higher_is_better=False, goal_on="ours",
                    baseline_name="Redis XREADGROUP", details={
        "goal_ms": GOAL_MS, "seconds": seconds, "body_bytes": BODY_BYTES,
        "messages": [len(ours_ns), len(redis_ns)], "target_msg_s": rate,
        "ours_achieved_msg_s": round(ours_rate), "redis_target_msg_s": round(redis_target),
        "redis_achieved_msg_s": round(redis_rate), "ours_ms": ours, "redis_ms": theirs,
        "long_poll_ms": POLL_MS,
    })  # fmt: skip
    result.rows = [
        (f"ours {name}", f"{ours[name]:.3f} ms", f"Redis {theirs[name]:.3f} ms")
        for name in ("p50", "p99", "p999")
    ]
    result.rows.append(("send rate achieved", f"{ours_rate:,.0f} msg/s",
                        f"target {rate:,.0f}; Redis {redis_rate:,.0f} of "
                        f"{redis_target:,.0f}"))  # fmt: skip
    return [result]
