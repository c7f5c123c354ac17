"""java-load: 16 Java threads of single sends into ours and into Apache RocketMQ, same run.

Both brokers run side by side for the whole run (issue 24, item 4): ours (our NameServer
and one broker serving gRPC and 4.x remoting, ``broker_core.cluster.local``) and the real
RocketMQ 5.x (``peers/rocketmq.py``: NameServer, broker inside the gRPC proxy), both with
async flush. ``peers/java/Load.java`` drives each with the same load: ``THREADS`` threads
sharing one producer, each sending single messages one after the other, a warm-up first
(JIT, connections, routes), then a measured window; it prints messages/s, p50/p99 send
latency and errors as one JSON line (:func:`parse_load`). Cases, each run against ours
then against RocketMQ, so drift on a shared machine hits both alike:

* the 4.x API (``DefaultMQProducer``, remoting, routes from each broker's NameServer), and
* the 5.x client (``Producer``, gRPC: our endpoint; RocketMQ's proxy),

at 128 B (``tiny`` and ``full``) and 1 KiB (``full``). The main figure is the 4.x 128 B
msg/s; ratio = ours / RocketMQ. ``details`` carry every case's figures:
``rocketmq_<case>_msg_s``, ``ours_<case>_msg_s``, ``<side>_<case>_p50_ms`` / ``_p99_ms``
/ ``_errors``, ``rocketmq_ratio`` (the main case), ``rocketmq_version``, and ``figures`` (msg/s per
side and case, for the throughput plot).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.report import Result

THREADS = 16
TOPIC = "bench-load"
QUEUES = 8
# size -> (warm-up s, measured s, body sizes)
SIZES: dict[str, tuple[float, float, tuple[int, ...]]] = {
    "tiny": (1.0, 2.0, (128,)),
    "full": (10.0, 20.0, (128, 1024)),
}
CLIENTS = ("4", "5")
LOAD_JVM = ["-Xms256m", "-Xmx512m", "-XX:+UseSerialGC"]
GOAL = 1.0  # as fast as Apache RocketMQ under the same Java load
OURS_CONFIG = {"broker": {"default_queue_nums": QUEUES}, "store": {"segment_size_bytes": 64 << 20}}


class LoadError(RuntimeError):
    """A load run that printed no figures (its output's tail in the message)."""


@dataclass(frozen=True)
class LoadFigures:
    """What one ``Load.java`` run printed."""

    client: str
    msg_s: float
    p50_ms: float
    p99_ms: float
    sent: int
    errors: int
    first_error: str


def parse_load(output: str) -> LoadFigures:
    """The figures from a ``Load.java`` run's output (its client's log lines ignored).

    >>> parse_load('log\\n{"event":"load","client":"4.x","msg_s":9.5,"p50_ms":1.0,'
    ...            '"p99_ms":3.0,"sent":19,"errors":0,"first_error":""}').msg_s
    9.5
    """
    for line in reversed(output.splitlines()):
        if not line.startswith('{"event"'):
            continue
        event = json.loads(line)
        if event["event"] == "error":
            raise LoadError(f"the producer did not start: {event['type']}: {event['message']}")
        if event["event"] == "load":
            return LoadFigures(
                str(event["client"]),
                float(event["msg_s"]),
                float(event["p50_ms"]),
                float(event["p99_ms"]),
                int(event["sent"]),
                int(event["errors"]),
                str(event.get("first_error", "")),
            )
    raise LoadError(f"the load printed no figures:\n{output[-2000:]}")


def _classpath(client: str) -> str:
    """``Load`` compiled against both clients; run with only the mode's client jars."""
    from peers import drivers
    from peers.rocketmq import CLIENT5_CLASSPATH, SERVER_CLASSPATH

    drivers.compiled("Load", f"{CLIENT5_CLASSPATH}{os.pathsep}{SERVER_CLASSPATH}")
    jars = SERVER_CLASSPATH if client == "4" else CLIENT5_CLASSPATH
    return f"{drivers.CLASSES / 'Load'}{os.pathsep}{jars}"


def run_load(
    client: str, endpoint: str, body: int, warmup_s: float, seconds: float, home: Path
) -> LoadFigures:
    """One ``Load.java`` run: ``client`` "4" (``endpoint`` = NameServer) or "5" (gRPC)."""
    home.mkdir(parents=True, exist_ok=True)
    args = [client, endpoint, TOPIC, str(THREADS), str(body), str(warmup_s), str(seconds)]
    cmd = ["java", *LOAD_JVM, f"-Duser.home={home}", "-cp", _classpath(client), "Load", *args]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    env.pop("CLASSPATH", None)
    timeout = warmup_s + seconds + 180
    try:
        done = subprocess.run(
            cmd, cwd=home, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise LoadError(f"Load {client} {endpoint} ran over {timeout:.0f} s") from None
    return parse_load(done.stdout + done.stderr)


@dataclass
class Side:
    name: str  # "ours" or "rocketmq"
    namesrv: str
    grpc: str
    cluster: str
    stop: Callable[[], None]

    def endpoint(self, client: str) -> str:
        return self.namesrv if client == "4" else self.grpc


def _start_ours(directory: Path) -> Side:
    from broker_core.cluster.local import LocalCluster

    local = LocalCluster(
        directory,
        broker_config=OURS_CONFIG,
        register_interval_ms=500,
        broker_args=["--remoting-listen", "127.0.0.1:0"],
    )
    local.start(1)
    return Side("ours", local.namesrv, local.endpoints["broker-a"], "DefaultCluster", local.stop)


def _start_peer(directory: Path) -> Side:
    from peers.rocketmq import CLUSTER, start_rocketmq

    peer = start_rocketmq(directory)
    return Side("rocketmq", peer.namesrv, peer.grpc, CLUSTER, peer.stop)


def _create_topic(side: Side, home: Path) -> None:
    from peers import drivers

    out = drivers.mqadmin(
        side.namesrv,
        ["updateTopic", "-c", side.cluster, "-t", TOPIC, "-r", str(QUEUES), "-w", str(QUEUES)],
        home,
    )
    if "success" not in out:
        raise LoadError(f"{side.name}: updateTopic {TOPIC} failed:\n{out[-1500:]}")


def case_name(client: str, body: int) -> str:
    """E.g. ``4x_128b`` (4.x client, 128 B bodies)."""
    return f"{client}x_{body}b"


def measure(size: str, root: Path) -> dict[str, dict[str, LoadFigures]]:
    """``{case: {"ours": figures, "rocketmq": figures}}`` with both brokers up."""
    warmup, seconds, bodies = SIZES[size]
    sides: list[Side] = []
    try:
        sides.append(_start_ours(root / "ours"))
        sides.append(_start_peer(root / "rocketmq"))
        for side in sides:
            _create_topic(side, root / "clients")
        found: dict[str, dict[str, LoadFigures]] = {}
        for body in bodies:
            for client in CLIENTS:
                case = found.setdefault(case_name(client, body), {})
                for side in sides:
                    figures = run_load(
                        client, side.endpoint(client), body, warmup, seconds, root / "clients"
                    )
                    print(f"  {side.name:<8} {case_name(client, body)}: {figures}", flush=True)
                    case[side.name] = figures
        return found
    finally:
        for side in reversed(sides):
            side.stop()


def details_of(found: dict[str, dict[str, LoadFigures]], version: str) -> dict[str, Any]:
    """The result's details: every case's figures per side, the main ratio, the version."""
    details: dict[str, Any] = {"threads": THREADS, "rocketmq_version": version}
    for case, by_side in found.items():
        for side, f in by_side.items():
            details[f"{side}_{case}_msg_s"] = round(f.msg_s)
            details[f"{side}_{case}_p50_ms"] = f.p50_ms
            details[f"{side}_{case}_p99_ms"] = f.p99_ms
            details[f"{side}_{case}_errors"] = f.errors
        ours, peer = by_side["ours"].msg_s, by_side["rocketmq"].msg_s
        details[f"rocketmq_{case}_ratio"] = round(ours / peer, 3) if peer else 0.0
    details["figures"] = {  # the throughput plot's bars (bench/plots.py)
        f"{'ours' if side == 'ours' else 'RocketMQ'} {case}": round(f.msg_s)
        for case, by_side in found.items()
        for side, f in by_side.items()
    }
    details["rocketmq_ratio"] = details[f"rocketmq_{case_name('4', 128)}_ratio"]
    details["rocketmq_msg_s"] = details[f"rocketmq_{case_name('4', 128)}_msg_s"]
    return details


def run(size: str, peers: tuple[str, ...] = ("rocketmq",)) -> list[Result]:
    """The workload (``python -m bench java-load``); it has no side without RocketMQ."""
    from peers.rocketmq import versions

    if "rocketmq" not in peers:
        raise LoadError("java-load compares ours with RocketMQ; it cannot run with --peer none")
    root = Path(tempfile.mkdtemp(prefix="bench-java-load-"))
    try:
        found = measure(size, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    version = versions()["rocketmq"]
    main = found[case_name("4", 128)]
    rows = [
        (
            f"{side} {case}",
            f"{f.msg_s:,.0f}",
            f"msg/s; p50 {f.p50_ms} ms, p99 {f.p99_ms} ms, {f.errors} errors",
        )
        for case, by_side in found.items()
        for side, f in by_side.items()
    ]
    return [
        Result(
            workload="java-load",
            ours=main["ours"].msg_s,
            baseline=main["rocketmq"].msg_s,
            unit="msg/s",
            goal=GOAL,
            details=details_of(found, version),
            rows=rows,
            baseline_name=f"RocketMQ {version}",
        )
    ]
