"""java-batch and java-latency: the Java 4.x client as the same load on ours and on RocketMQ.

Both brokers run side by side (``bench/java_load.py``'s sides: ours, a NameServer and one
broker; Apache RocketMQ 5.x with its NameServer, async flush both, 8 queues a topic), and
``peers/java/Load.java`` drives each in turn with the same arguments, so the Python
client's own cost does not hide the broker's (issue 24 item 4, issue 27):

* **java-batch** — ``Load batch``: 16 threads of 4.x batch sends (256 × 128 B) into one
  topic (``batch``, the main figure; after an unmeasured run that warms each broker up),
  then spread over 64 and over 256 topics
  (``topics64``, ``topics256``: a batch per topic, round robin); ``Load drain``: a topic
  filled with :data:`DRAIN` messages read back from offset 0 by ``DefaultMQPullConsumer``,
  8 threads over the 8 queues (``drain``). Ratio = ours / RocketMQ (msg/s).
* **java-latency** — ``peers/java/Sweep.java``: send → receive latency measured as OpenMessaging
  Benchmark does. One JVM holds a producer (16 sending threads) and a push consumer; it
  finds the highest rate sustained with a bounded backlog (unpaced sends: the lower of
  the send rate and the rate received in the window; the higher of two such windows, the
  second running warmer), then offers 10, 50, 80 and 100 % of
  it, and 5,000 msg/s (issue 27's goal), each for a window, and reports p50/p99/p99.9 of
  each step's messages. The figure is ours' p99 at 5,000 msg/s (goal ≤ 5 ms) against
  RocketMQ's (check: ≤ 2× it); ``details.curve`` feeds the latency–throughput plot.

``details`` carry ``<side>_<case>_msg_s`` / ``_p50_ms`` / ``_p99_ms`` (batch cases, side
``ours`` or ``rocketmq``), ``rocketmq_<case>_ratio``, ``rocketmq_ratio`` (the main
figure's), ``rocketmq_version`` and ``peer_cases`` (one row each in BENCHMARKS.md's peer
table). Both workloads need the peer: ``--peer none`` is refused (``real_peers.PEER_ONLY``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import java_load
from bench.java_load import LoadError, Side
from bench.report import Result

THREADS = 16
BATCH = 256
BODY = 128
TOPIC_COUNTS = (64, 256)
# size -> (warm-up s, window s, messages drained)
BATCH_SIZES = {"tiny": (1.0, 2.0, 20_000), "full": (10.0, 20.0, 500_000)}
# size -> (warm-up s, step s)
SWEEP_SIZES = {"tiny": (1.0, 2.0), "full": (15.0, 15.0)}
FRACTIONS = (0.1, 0.5, 0.8, 1.0)
GOAL_RATE = 5_000  # msg/s at which issue 27's latency goal is stated
LATENCY_GOAL_MS = 5.0
LATENCY_PEER_FACTOR = 2.0  # ours' p99 ≤ 2× RocketMQ's
BATCH_GOAL = 1.0  # batch produce and consume ≥ RocketMQ with the same client
STEPS = ",".join(["max", "max", *(f"f{f}" for f in FRACTIONS), f"r{GOAL_RATE}"])


def _classpath(main: str) -> str:
    """The 4.x class path for ``Load``, or for ``Sweep`` (compiled and run beside Load's
    classes, whose helpers it uses)."""
    from peers import drivers

    load = java_load._classpath("4")
    if main == "Load":
        return load
    drivers.compiled(main, load)
    return f"{drivers.CLASSES / main}{os.pathsep}{load}"


def run_java(args: list[str], home: Path, timeout_s: float, main: str = "Load") -> list[Any]:
    """Run ``main`` (``Load`` or ``Sweep``, 4.x class path) with ``args``; every JSON event
    line it printed."""
    home.mkdir(parents=True, exist_ok=True)
    cmd = ["java", *java_load.LOAD_JVM, f"-Duser.home={home}", "-cp", _classpath(main)]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    env.pop("CLASSPATH", None)
    try:
        done = subprocess.run(
            [*cmd, main, *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise LoadError(f"Load {' '.join(args[:3])} ran over {timeout_s:.0f} s") from None
    return parse_events(done.stdout + done.stderr)


def parse_events(output: str) -> list[dict[str, Any]]:
    """The ``{"event": ...}`` lines of a run; an error event or none at all raises.

    >>> parse_events('log\\n{"event":"drain","msg_s":5.0}')
    [{'event': 'drain', 'msg_s': 5.0}]
    """
    events = [json.loads(ln) for ln in output.splitlines() if ln.startswith('{"event"')]
    for event in events:
        if event["event"] == "error":
            raise LoadError(f"the client did not start: {event['type']}: {event['message']}")
    if not events:
        raise LoadError(f"the load printed no figures:\n{output[-2000:]}")
    return events


def _both_sides(root: Path, each: Callable[[Side, Path], dict[str, Any]]) -> dict[str, Any]:
    """``{side name: each(side, client home)}``, ours then RocketMQ, both brokers up."""
    sides: list[Side] = []
    try:
        sides.append(java_load._start_ours(root / "ours"))
        sides.append(java_load._start_peer(root / "rocketmq"))
        found = {}
        for side in sides:
            found[side.name] = each(side, root / "clients")
            print(f"  {side.name}: {found[side.name]}", flush=True)
        return found
    finally:
        for side in reversed(sides):
            side.stop()


def _in_temp(prefix: str, work: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return work(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _version() -> str:
    from peers.rocketmq import versions

    return versions()["rocketmq"]


def _refuse_without(peers: tuple[str, ...], workload: str) -> None:
    if "rocketmq" not in peers:
        raise LoadError(f"{workload} compares ours with RocketMQ; it cannot run with --peer none")


# --- java-batch ---------------------------------------------------------------------------


def _batch_cases(size: str) -> Callable[[Side, Path], dict[str, Any]]:
    warmup, seconds, drained = BATCH_SIZES[size]
    timeout = warmup + seconds + 240

    def each(side: Side, home: Path) -> dict[str, Any]:
        found: dict[str, Any] = {}
        # the broker's own warm-up (JIT, page cache), unmeasured: a cold JVM broker refused
        # or stalled the first case's sends in a tiny run
        args = ["batch", side.namesrv, "bench-warm", "1", str(THREADS), str(BODY), str(BATCH)]
        run_java([*args, "0", str(warmup + seconds)], home, timeout)
        for case, topics in (("batch", 1), *((f"topics{n}", n) for n in TOPIC_COUNTS)):
            args = ["batch", side.namesrv, f"bench-{case}", str(topics), str(THREADS)]
            args += [str(BODY), str(BATCH), str(warmup), str(seconds)]
            found[case] = run_java(args, home, timeout)[-1]
        args = ["drain", side.namesrv, "bench-drain", str(java_load.QUEUES), str(BODY)]
        found["drain"] = run_java([*args, str(drained)], home, timeout + drained / 500)[-1]
        return found

    return each


BATCH_WHAT = {
    "batch": "batch produce 256 × 128 B, 16 senders, Java 4.x",
    "topics64": "batch produce over 64 topics, 16 senders, Java 4.x",
    "topics256": "batch produce over 256 topics, 16 senders, Java 4.x",
    "drain": "consume: drain by pull from offset 0, 8 threads, Java 4.x",
}


def batch_details(found: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    """Per case and side: msg/s (p50/p99 of a call where measured), the ratios, the rows."""
    details: dict[str, Any] = {"threads": THREADS, "batch": BATCH, "body_bytes": BODY}
    details["rocketmq_version"] = version
    cases: list[dict[str, Any]] = []
    for case, what in BATCH_WHAT.items():
        for side in ("ours", "rocketmq"):
            event = found[side][case]
            if case == "drain" and event.get("read") != event.get("filled"):
                # a partial drain is no figure: said, and left out of the ratios
                details[f"{side}_drain_error"] = (
                    f"read {event.get('read')} of {event.get('filled')} messages: "
                    f"{event.get('first_error') or 'no error given'}"
                )
                continue
            details[f"{side}_{case}_msg_s"] = round(event["msg_s"])
            for key in (
                "p50_ms",
                "p99_ms",
                "errors",
                "bad",
                "dispatch_wait_s",
                "held_at_first_look",
            ):
                if key in event:
                    details[f"{side}_{case}_{key}"] = event[key]
        ours, peer = details.get(f"ours_{case}_msg_s"), details.get(f"rocketmq_{case}_msg_s")
        if ours is None or peer is None:
            continue
        details[f"rocketmq_{case}_ratio"] = round(ours / peer, 3) if peer else 0.0
        cases.append({"case": what, "peer": "rocketmq", "ours": ours, "theirs": peer})
        cases[-1].update(unit="msg/s", higher_is_better=True)
    for side in ("ours", "rocketmq"):
        low, high = (details[f"{side}_topics{n}_msg_s"] for n in TOPIC_COUNTS)
        details[f"{side}_topics_256_over_64"] = round(high / low, 3) if low else 0.0
    details["rocketmq_ratio"] = details["rocketmq_batch_ratio"]
    details["rocketmq_msg_s"] = details["rocketmq_batch_msg_s"]
    details["peer_cases"] = cases
    details["figures"] = {
        f"{'ours' if side == 'ours' else 'RocketMQ'} {case}": details[f"{side}_{case}_msg_s"]
        for case in BATCH_WHAT
        for side in ("ours", "rocketmq")
        if f"{side}_{case}_msg_s" in details
    }
    return details


def run_batch(size: str, peers: tuple[str, ...] = ("rocketmq",)) -> list[Result]:
    """``python -m bench java-batch``."""
    _refuse_without(peers, "java-batch")
    found = _in_temp("bench-java-batch-", lambda root: _both_sides(root, _batch_cases(size)))
    details = batch_details(found, _version())
    rows = [
        (
            f"{side} {case}",
            f"{details[f'{side}_{case}_msg_s']:,}"
            if f"{side}_{case}_msg_s" in details
            else "failed",
            "msg/s" if f"{side}_{case}_msg_s" in details else details[f"{side}_{case}_error"],
        )
        for case in BATCH_WHAT
        for side in ("ours", "rocketmq")
    ]
    result = Result(
        "java-batch",
        details["ours_batch_msg_s"],
        details["rocketmq_batch_msg_s"],
        "msg/s",
        goal=BATCH_GOAL,
        details=details,
        rows=rows,
        baseline_name=f"RocketMQ {details['rocketmq_version']}",
    )
    return [result]


# --- java-latency -------------------------------------------------------------------------


def _sweep(size: str) -> Callable[[Side, Path], dict[str, Any]]:
    warmup, seconds = SWEEP_SIZES[size]
    timeout = warmup + 8 * (seconds + max(10.0, 2 * seconds)) + 120

    def each(side: Side, home: Path) -> dict[str, Any]:
        args = [side.namesrv, "bench-latency", str(THREADS), str(BODY)]
        events = run_java([*args, str(warmup), str(seconds), STEPS], home, timeout, "Sweep")
        steps = {e["step"]: e for e in events if e["event"] == "step" and e["step"] != "warmup"}
        sweep = [e for e in events if e["event"] == "sweep"]
        if not sweep:
            raise LoadError(f"{side.name}: the latency sweep did not finish: {events[-1]}")
        return {"steps": steps, "sustained_msg_s": sweep[-1]["sustained_msg_s"]}

    return each


def latency_details(found: dict[str, dict[str, Any]], version: str) -> dict[str, Any]:
    """The curve per side, the sustained rates, and the figures at :data:`GOAL_RATE`."""
    goal_step = f"r{GOAL_RATE}"
    details: dict[str, Any] = {"threads": THREADS, "body_bytes": BODY, "goal_rate": GOAL_RATE}
    details["rocketmq_version"] = version
    details["curve"] = {}
    for side in ("ours", "rocketmq"):
        steps = found[side]["steps"]
        details[f"{side}_sustained_msg_s"] = round(found[side]["sustained_msg_s"])
        at_goal = steps[goal_step]
        details[f"{side}_at_{GOAL_RATE}_sent_msg_s"] = round(at_goal["sent_msg_s"])
        for p in ("p50", "p99", "p999"):
            details[f"{side}_{p}_at_{GOAL_RATE}_ms"] = at_goal[f"{p}_ms"]
        details["curve"][side] = [
            {
                "step": name,
                "msg_s": round(steps[name]["received_msg_s"]),
                **{p: steps[name][f"{p}_ms"] for p in ("p50", "p99", "p999")},
                "backlog": steps[name]["backlog"],
            }
            for name in (f"f{f}" for f in FRACTIONS)
            if name in steps
        ]
    ours, peer = (details[f"{s}_p99_at_{GOAL_RATE}_ms"] for s in ("ours", "rocketmq"))
    details["rocketmq_p99_ms"] = peer
    details["rocketmq_ratio"] = round(ours / peer, 3) if peer else 0.0
    details["peer_cases"] = [
        {
            "case": f"send→receive p99 at {GOAL_RATE:,} msg/s offered, 128 B, Java 4.x",
            "peer": "rocketmq",
            "ours": ours,
            "theirs": peer,
            "unit": "ms",
            "higher_is_better": False,
        },
        {
            "case": "highest rate sustained with a bounded backlog, Java 4.x (16 senders)",
            "peer": "rocketmq",
            "ours": details["ours_sustained_msg_s"],
            "theirs": details["rocketmq_sustained_msg_s"],
            "unit": "msg/s",
            "higher_is_better": True,
        },
    ]
    return details


def run_latency(size: str, peers: tuple[str, ...] = ("rocketmq",)) -> list[Result]:
    """``python -m bench java-latency``."""
    _refuse_without(peers, "java-latency")
    found = _in_temp("bench-java-latency-", lambda root: _both_sides(root, _sweep(size)))
    details = latency_details(found, _version())
    rows = [
        (f"{side} {point['step']}", f"{point['msg_s']:,} msg/s", f"p99 {point['p99']} ms")
        for side, curve in details["curve"].items()
        for point in curve
    ]
    ours = details[f"ours_p99_at_{GOAL_RATE}_ms"]
    reached = details[f"ours_at_{GOAL_RATE}_sent_msg_s"] >= 0.95 * GOAL_RATE
    result = Result(
        "java-latency",
        ours,
        details["rocketmq_p99_ms"],
        "ms",
        goal=LATENCY_GOAL_MS,
        details=details,
        rows=rows,
        higher_is_better=False,
        goal_on="ours",
        baseline_name=f"RocketMQ {details['rocketmq_version']}",
        checks={
            f"p99 ≤ {LATENCY_PEER_FACTOR:g}× RocketMQ's": 0
            < details["rocketmq_ratio"]
            <= LATENCY_PEER_FACTOR,
            f"ours sent {GOAL_RATE:,} msg/s": reached,
        },
    )
    return [result]
