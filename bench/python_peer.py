"""python-load: the Python clients as the same load on ours and on RocketMQ's proxy.

Both brokers run side by side (``bench/java_load.py``'s sides, async flush both, a topic
of 8 queues made by ``mqadmin updateTopic`` on each); each case runs against ours, then
against RocketMQ's gRPC proxy, with the same client and arguments (issue 24 item 4):

* ``official`` — the official Python client (``rocketmq``, gRPC): 16 threads sharing one
  ``Producer``, each sending single 128 B messages one after the other, in a process of
  its own (``python -m bench.python_peer official …``: its asyncio loop and threads stay
  out of the bench's), a warm-up first. Issue 27's goal: ≥ 1.0× the proxy.
* ``single`` — our client (``RocketMQClient``), 16 threads of single sends.
* ``batch`` — our client, one thread of ``send_batch`` of 256 × 128 B. Against ours it
  takes our bulk service; against the proxy, which serves ``apache.rocketmq.v2`` only, the
  client's standard fallback sends the same batch as one SendMessage (what a user of the
  client gets on each broker).
* ``drain`` — our client reads the topic back (what ``batch`` stored) queue by queue from
  its first offset with ``pull_columns`` (10,000 asked a call). RocketMQ 5.5's proxy does
  not implement QueryOffset or PullMessage, so there the case ends in the client's
  ServiceNotOfferedError (recorded; no ratio).

A case a broker refuses is recorded as an error in ``details`` (``<side>_<case>_error``)
and left out of the ratios. The main figure is ``official`` (msg/s, ours / RocketMQ).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import java_load
from bench.java_load import LoadError, Side
from bench.report import Result, percentiles_ms

THREADS = 16
BODY = b"x" * 128
BATCH = 256
TOPIC = "bench-python"
GROUP = "GID_bench_python"
PULL_ASK = 10_000
SIZES = {"tiny": (1.0, 2.0), "full": (10.0, 20.0)}  # warm-up s, window s per case
GOAL = 1.0  # the official client's single sends ≥ RocketMQ proxy's
CASES = {
    "official": "single sends, 16 threads, official Python client",
    "single": "single sends, 16 threads, our Python client",
    "batch": "batch produce 256 × 128 B, 1 thread, our Python client",
    "drain": "consume: drain by pull from the first offset, our Python client",
}


def threads_of_sends(send: Any, warmup_s: float, seconds: float) -> dict[str, Any]:
    """:data:`THREADS` threads calling ``send()`` back to back: warm-up, then a window."""
    phase = {"measure": False, "stop": False}
    latencies: list[list[int]] = [[] for _ in range(THREADS)]
    errors = [0] * THREADS
    first_error: list[str] = []

    def worker(i: int) -> None:
        while not phase["stop"]:
            measured = phase["measure"]
            started = time.perf_counter_ns()
            try:
                send()
            except Exception as exc:  # counted and named, as Load.java does
                errors[i] += measured
                first_error.append(f"{type(exc).__name__}: {exc}")
                continue
            if measured:
                latencies[i].append(time.perf_counter_ns() - started)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    time.sleep(warmup_s)
    phase["measure"] = True
    started = time.perf_counter()
    time.sleep(seconds)
    phase["stop"] = True
    window = time.perf_counter() - started
    for t in threads:
        t.join(60)
    every = [x for per in latencies for x in per]
    shown = percentiles_ms(every) if every else {"p50": 0.0, "p99": 0.0, "p999": 0.0}
    return {
        "msg_s": round(len(every) / window, 1),
        "p50_ms": shown["p50"],
        "p99_ms": shown["p99"],
        "errors": sum(errors),
        "first_error": first_error[0][:300] if first_error else "",
    }


def official_main(endpoint: str, warmup_s: float, seconds: float) -> None:
    """``python -m bench.python_peer official ENDPOINT WARMUP_S SECONDS``: one JSON line."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials()), (TOPIC,))
    producer.startup()

    def send() -> None:
        msg = Message()
        msg.topic, msg.body = TOPIC, BODY
        producer.send(msg)

    try:
        figures = threads_of_sends(send, warmup_s, seconds)
    finally:
        producer.shutdown()
    print(json.dumps({"event": "official", **figures}), flush=True)


def _official(side: Side, warmup_s: float, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.python_peer", "official", side.grpc]
    done = subprocess.run(
        [*cmd, str(warmup_s), str(seconds)],
        capture_output=True,
        text=True,
        timeout=warmup_s + seconds + 180,
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith('{"event"'):
            return dict(json.loads(line))
    raise LoadError(f"the official client printed no figures:\n{done.stderr[-2000:]}")


def _batch(client: Any, warmup_s: float, seconds: float) -> dict[str, Any]:
    batch = [BODY] * BATCH
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        client.send_batch(TOPIC, batch)
    sent, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        client.send_batch(TOPIC, batch)
        sent += BATCH
    return {"msg_s": round(sent / (time.perf_counter() - started), 1)}


def _drain(client: Any) -> dict[str, Any]:
    queues = client.topic_status(TOPIC)
    read, started = 0, time.perf_counter()
    for queue in queues:
        offset, end = queue["min_offset"], queue["max_offset"]
        while offset < end:
            batch = client.pull_columns(GROUP, TOPIC, queue["queue_id"], offset, PULL_ASK)
            if batch.next_offset <= offset:
                raise LoadError(f"drain stalled at queue {queue['queue_id']} offset {offset}")
            read += batch.columns.count
            offset = batch.next_offset
    seconds = time.perf_counter() - started
    return {"msg_s": round(read / seconds, 1) if seconds else 0.0, "read": read}


def _cases(side: Side, warmup_s: float, seconds: float, home: Path) -> dict[str, Any]:
    from broker_core.client import RocketMQClient
    from peers import drivers

    args = ["updateTopic", "-c", side.cluster, "-t", TOPIC, "-r", "8", "-w", "8"]
    if "success" not in drivers.mqadmin(side.namesrv, args, home):
        raise LoadError(f"{side.name}: updateTopic {TOPIC} failed")
    found: dict[str, Any] = {}
    with RocketMQClient(side.grpc) as client:
        threads_of_sends(lambda: client.send(TOPIC, BODY), 0.0, 2 * warmup_s)  # the broker's
        found["single"] = _attempt(
            lambda: threads_of_sends(lambda: client.send(TOPIC, BODY), warmup_s, seconds)
        )
        found["batch"] = _attempt(lambda: _batch(client, warmup_s, seconds))
        # the main case after an unmeasured warm-up and two cases: a JVM peer's JIT is warm
        # by then (run first, the proxy's sends ran at a quarter of their later rate)
        found["official"] = _attempt(lambda: _official(side, warmup_s, seconds))
        found["drain"] = _attempt(lambda: _drain(client))
    return {case: found[case] for case in CASES}


def _attempt(case: Any) -> dict[str, Any]:
    """A case's figures, or ``{"error": text}`` when the broker refused it."""
    try:
        return dict(case())
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def details_of(found: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    """Per case and side the figures (or the error), the ratios and one peer row each."""
    details: dict[str, Any] = {"threads": THREADS, "batch": BATCH, "body_bytes": len(BODY)}
    details["rocketmq_version"] = version
    cases = []
    for case, what in CASES.items():
        for side in ("ours", "rocketmq"):
            figures = found[side][case]
            for key, value in figures.items():
                details[f"{side}_{case}_{key}"] = value
        ours = found["ours"][case].get("msg_s", 0.0)
        peer = found["rocketmq"][case].get("msg_s", 0.0)
        if ours and peer:
            details[f"rocketmq_{case}_ratio"] = round(ours / peer, 3)
            cases.append({"case": what, "peer": "rocketmq", "ours": ours, "theirs": peer})
            cases[-1].update(unit="msg/s", higher_is_better=True)
    details["peer_cases"] = cases
    if "rocketmq_official_ratio" in details:
        details["rocketmq_ratio"] = details["rocketmq_official_ratio"]
    details["figures"] = {
        f"{'ours' if side == 'ours' else 'RocketMQ'} {case}": found[side][case]["msg_s"]
        for case in CASES
        for side in ("ours", "rocketmq")
        if "msg_s" in found[side][case]
    }
    return details


def run(size: str, peers: tuple[str, ...] = ("rocketmq",)) -> list[Result]:
    """``python -m bench python-load``."""
    from peers.rocketmq import versions

    if "rocketmq" not in peers:
        raise LoadError("python-load compares ours with RocketMQ; it cannot run with --peer none")
    warmup, seconds = SIZES[size]
    root = Path(tempfile.mkdtemp(prefix="bench-python-load-"))
    sides: list[Side] = []
    found: dict[str, dict[str, Any]] = {}
    try:
        sides.append(java_load._start_ours(root / "ours"))
        sides.append(java_load._start_peer(root / "rocketmq"))
        for side in sides:
            found[side.name] = _cases(side, warmup, seconds, root / "clients")
            print(f"  {side.name}: {found[side.name]}", flush=True)
    finally:
        for side in reversed(sides):
            side.stop()
        shutil.rmtree(root, ignore_errors=True)
    details = details_of(found, versions()["rocketmq"])
    ours, peer = (found[s]["official"].get("msg_s", 0.0) for s in ("ours", "rocketmq"))
    if not ours or not peer:
        raise LoadError(f"the official client's case failed: {found}")
    rows = [
        (f"{side} {case}", f"{found[side][case].get('msg_s', 0):,.0f}", "msg/s")
        for case in CASES
        for side in ("ours", "rocketmq")
    ]
    return [
        Result(
            "python-load",
            ours,
            peer,
            "msg/s",
            goal=GOAL,
            details=details,
            rows=rows,
            baseline_name=f"RocketMQ {details['rocketmq_version']} proxy",
        )
    ]


if __name__ == "__main__":
    if sys.argv[1:2] != ["official"]:
        raise SystemExit("usage: python -m bench.python_peer official ENDPOINT WARMUP_S SECONDS")
    official_main(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
