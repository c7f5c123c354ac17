"""Write ``BENCHMARKS.md`` and its PNG plots from a list of workload results.

Input: the JSON objects the workloads print (``Result.to_dict``), or for a workload that
failed ``{"workload": name, "error": text}``. Output, under ``out``:

* ``BENCHMARKS.md`` — one table (workload, ours, baseline, unit, ratio, goal, met?), a
  table of ours against the real peers (Kafka, RocketMQ; ``bench/real_peers.py``), the
  conditions of each workload, the hand-written notes of ``bench/NOTES.md``, the peers and
  their versions, the machine and the date;
* ``bench/ratios.png`` — per workload, the figure its goal applies to against the goal;
* ``bench/throughput.png`` — per throughput workload, ours against each peer;
* ``bench/latency.png`` — p50/p99/p999 of the latency and backlog workloads;
* ``bench/peers.png`` — per workload and real peer, ours / peer;
* ``bench/latency_curve.png`` — java-latency's latency–throughput curve, ours and RocketMQ.

The peer table has a row per ``details.peer_cases`` entry where a workload lists several
cases, else one per ``<peer>_ratio``; issue 27's goals table comes from ``bench/goals.py``
(with ``bench/send_cost.json`` beside ``results.json`` for our CPU per call, when run).

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import goals, real_peers
from bench.peers import versions

ORDER = (
    "store-append",
    "produce",
    "consume",
    "latency",
    "topics",
    "backlog",
    "spark-read",
    "spark-write",
    "server-mode",
    "cluster",
    "replication",
    "remoting",
    "java-load",
    "java-batch",
    "java-latency",
    "python-load",
)
WHAT = {
    "python-load": "16 threads of single 128 B sends with the official Python client into ours "
    "vs RocketMQ's gRPC proxy, same run; our Python client's single, batch and drain in details",
    "java-batch": "16 Java 4.x threads of batch sends (256 × 128 B) into ours vs Apache "
    "RocketMQ 5.x, same run; 64 → 256 topics and a pull drain in details and the peer table",
    "java-latency": "send → receive p99 of single 128 B messages, Java 4.x producer and push "
    "consumer, at 5,000 msg/s offered, ours vs RocketMQ; OpenMessaging-style curve at 10–100 % "
    "of the highest sustained rate in details",
    "java-load": "16 Java threads of single 128 B sends (the 4.x client over remoting; 5.x "
    "gRPC and 1 KiB in details) into ours vs Apache RocketMQ 5.x, same run, async flush both",
    "remoting": "4.x remoting SEND_BATCH_MESSAGE (batch 256 × 128 B, one client) vs gRPC "
    "batch send on the same broker, same run; remoting vs gRPC offset-pull drain in details",
    "cluster": "batch-send throughput (2 sender processes, batch 256 × 128 B) into a topic on "
    "2 broker groups vs on 1, same run; check: a `namesrv=` client's single send within 5 % "
    "of an `endpoints=` one",
    "store-append": "1 KiB appends through the store (batch 64, async flush; sync group "
    "commit with 64 appenders in details) vs raw `os.write` of the same bytes",
    "produce": "gRPC batch send, 128 B, batch 256, 1 client vs Redis XADD pipelined "
    "(JetStream publish in details)",
    "consume": "drain a backlog by offset pull (8 queues, 10,000 per pull) vs Redis XREAD "
    "COUNT 10000",
    "latency": "send → long-poll receive of single 128 B messages at a fixed rate, p99 vs "
    "Redis XADD → XREADGROUP BLOCK",
    "topics": "batch-send throughput over 256 topics × 8 queues vs 64 topics × 8 queues",
    "backlog": "random-offset single-pull p99 at the large vs the small backlog; broker RSS",
    "server-mode": "grpc's thread-pool server vs its asyncio server (same handlers): 16 "
    "threads of single sends (batch-256 rates in details)",
    "replication": "batch send (256 × 128 B) to a master with one slave, sync replication "
    "vs one broker without; async replication and single-send latency in details",
    "spark-read": "8 queues → `noop` sink through `format('rocketmq')` vs the same rows "
    "from Parquet (Spark's Kafka connector on a real Kafka: peer table)",
    "spark-write": "rows → topic through `format('rocketmq')` vs the same rows → Parquet "
    "(Spark's Kafka connector on a real Kafka: peer table)",
}
SEND_COST_FILE = "send_cost.json"  # beside results.json: `python -m bench.send_cost`'s output
CONDITIONS = [
    "Message bodies: 128 B (store-append: 1 KiB). Batches: 256 per send (produce, topics), "
    "1,024 per fill send, 10,000 per pull/XREAD (consume), single messages (latency, "
    "backlog pulls).",
    "Flush: our broker async (flush every 500 ms, the default); store-append also measures "
    "`flush_mode=sync`. Redis: AOF `appendfsync everysec`, no RDB. JetStream: file storage "
    "with the server's default sync interval.",
    "Every system runs on loopback on this machine, started by the bench and stopped after; "
    "every client is Python, one client process per side.",
    "Kafka (spark-read, spark-write): one KRaft node (broker and controller) fetched by Maven "
    "(`peers/kafka/pom.xml`), heap 512 MiB, 64 MiB segments, each log flushed every 500 ms "
    "like our async flush, 8 partitions per topic like our 8 queues; Spark's Kafka connector "
    "with its default options in the same session (`peers/kafka.md`).",
    "Apache RocketMQ (java-load): NameServer and a broker inside the gRPC proxy fetched by Maven "
    "(`peers/rocketmq.py`), heap 512 MiB, 64 MiB commit-log files, async flush like ours; "
    "the topic has 8 queues on both; the Java load (`peers/java/Load.java`, heap 512 MiB) warms "
    "up 10 s before its 20 s window.",
    "Apache RocketMQ (java-batch, java-latency): the same peer and settings; the load is "
    "`peers/java/Load.java` (modes `batch`, `drain`) and `Sweep.java` with the 4.x client "
    "on both brokers, heap 512 MiB, serial GC, one JVM per run that first creates its topics "
    "(8 queues) on the broker. java-batch warms up 10 s before each 20 s window; its drain "
    "fills 500,000 messages first (untimed) and pulls up to 1,024 a call. java-latency warms "
    "up 15 s, then finds the highest rate sustained with a bounded backlog (two 15 s unpaced "
    "windows, the higher of each one's lower of the rates sent and received) and offers "
    "10/50/80/100 % of it and 5,000 msg/s, 15 s each, waiting for each step's messages to "
    "arrive before the next; latency is from the send call to the push consumer's listener, "
    "in one JVM (one clock).",
    "Apache RocketMQ (python-load): the same peer, reached through its gRPC proxy; the "
    "official Python client runs in a process of its own, 16 threads sharing one producer, "
    "warm-up 10 s, window 20 s per case; our Python client reaches the proxy through its "
    "standard `apache.rocketmq.v2` fallback (SendMessage) and ours through its own services, "
    "as a user of the client gets on each. The proxy does not implement QueryOffset or "
    "PullMessage, so our client's drain has no RocketMQ side (`rocketmq_drain_error`).",
]


def machine() -> dict[str, str]:
    """CPU count and model, RAM, Python, OS, date (UTC)."""
    info = {
        "cpus": str(os.cpu_count()),
        "cpu model": _cpuinfo("model name"),
        "RAM": _meminfo_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    for package in ("grpcio", "redis", "nats-py", "pyspark", "matplotlib"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = "not installed"
    return info


def _cpuinfo(field: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown"


def _meminfo_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def fmt(value: float) -> str:
    """A readable figure: thousands separators for big numbers, 3 significant digits else."""
    if value == 0 or not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _row(result: dict[str, Any]) -> str:
    name = result["workload"]
    if "error" in result:
        return f"| {name} | {WHAT.get(name, '')} | failed | | | | | no |"
    met = "**yes**" if result["meets_goal"] else "no"
    goal = result.get("goal_text", f"ratio ≥ {result['goal']}")
    checks = "".join(
        f"; {k}: {'yes' if ok else 'no'}" for k, ok in result.get("checks", {}).items()
    )
    return (
        f"| {name} | {WHAT.get(name, '')} | {fmt(result['ours'])} | "
        f"{fmt(result['baseline'])} ({result.get('baseline_name', 'baseline')}) | "
        f"{result['unit']} | {result['ratio']:.3f} | {goal}{checks} | {met} |"
    )


def _case_rows(r: dict[str, Any]) -> list[str]:
    """One peer-table row per ``details.peer_cases`` entry (a workload of several cases)."""
    rows = []
    for case in r.get("details", {}).get("peer_cases", []):
        label = real_peers.LABELS[case["peer"]]
        version = r["details"].get(f"{case['peer']}_version", "")
        ours, theirs = case["ours"], case["theirs"]
        ratio = ours / theirs if theirs else 0.0
        rows.append(
            f"| {r['workload']}: {case['case']} | {label} {version} | {fmt(ours)} | "
            f"{fmt(theirs)} | {case['unit']} | {ratio:.3f} |"
        )
    return rows


def _peer_rows(results: Sequence[dict[str, Any]]) -> list[str]:
    """The table of ours against each real peer a result ran beside (``<peer>_ratio``)."""
    rows = []
    for r in results:
        details = r.get("details", {})
        if details.get("peer_cases"):
            rows += _case_rows(r)
            continue
        for peer, ratio in real_peers.ratios(details).items():
            label = real_peers.LABELS[peer]
            version = details.get(f"{peer}_version", "")
            theirs = r["ours"] / ratio if ratio else 0.0
            rows.append(
                f"| {r['workload']} | {label} {version} | {fmt(r['ours'])} | {fmt(theirs)} | "
                f"{r['unit']} | {ratio:.3f} |"
            )
    if not rows:
        return []
    return [
        "## Against the real peers",
        "",
        "The same workload through the peer in the same run (`ratio` = ours / peer; "
        "higher is better for throughput, lower for latency in ms).",
        "",
        "| workload | peer | ours | peer | unit | ratio |",
        "|---|---|---:|---:|---|---:|",
        *rows,
        "",
    ]


def _peer_versions() -> list[str]:
    from peers import kafka, rocketmq

    found = {**kafka.versions(), **rocketmq.versions()}
    return [f"- {artifact} (Maven): {version}" for artifact, version in found.items()]


def _details(result: dict[str, Any]) -> list[str]:
    if "error" in result:
        return [f"- **{result['workload']}** failed:", "", "```", result["error"][-2000:], "```"]
    hidden = ("figures", "peer_cases")
    shown = {k: v for k, v in result.get("details", {}).items() if k not in hidden}
    parts = ", ".join(f"{k}: {v}" for k, v in shown.items())
    return [f"- **{result['workload']}** — {parts}"]


def markdown(
    results: Sequence[dict[str, Any]],
    size: str,
    pngs: Sequence[str],
    send_cost: dict[str, Any] | None = None,
) -> str:
    """The whole BENCHMARKS.md text (``send_cost``: ``bench.send_cost``'s JSON, if run)."""
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench all"
        + ("" if size == "full" else f" --size {size}")
        + "`; every figure is ours "
        "and a baseline measured in the same run on the same machine. `ratio` is "
        "ours / baseline; the goal column says which way is better.",
        "",
    ]
    if size != "full":
        lines += [f"**Size `{size}`: a smoke run. These figures are not measurements.**", ""]
    lines += [
        "| workload | what | ours | baseline | unit | ratio | goal | met? |",
        "|---|---|---:|---:|---|---:|---|---|",
    ]
    lines += [_row(r) for r in results]
    lines += ["", *(f"![{Path(p).stem}]({p})" for p in pngs), ""]
    lines += [*_peer_rows(results), *goals.markdown(results, send_cost), "## Conditions", ""]
    lines += [f"- {c}" for c in CONDITIONS]
    lines += ["", "### Per workload", ""]
    for result in results:
        lines += _details(result)
    lines += ["", *_notes()]
    lines += ["", "## Peers", ""]
    lines += [f"- `{binary} --version`: {text}" for binary, text in versions().items()]
    lines += _peer_versions()
    lines += ["", "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in machine().items()]
    return "\n".join(lines) + "\n"


def _notes() -> list[str]:
    """The hand-written analysis kept in ``bench/NOTES.md`` (nothing when it is absent)."""
    path = Path(__file__).with_name("NOTES.md")
    return path.read_text().rstrip("\n").split("\n") if path.exists() else []


def write(results: Sequence[dict[str, Any]], out: Path, size: str) -> list[Path]:
    """Write BENCHMARKS.md and the plots under ``out``; returns the files written."""
    from bench import plots

    png_dir = out / "bench"
    png_dir.mkdir(parents=True, exist_ok=True)
    ok = [r for r in results if "error" not in r]
    pngs = plots.draw_all(ok, png_dir)
    md = out / "BENCHMARKS.md"
    cost_file = png_dir / SEND_COST_FILE
    send_cost = json.loads(cost_file.read_text()) if cost_file.exists() else None
    md.write_text(markdown(results, size, [str(p.relative_to(out)) for p in pngs], send_cost))
    return [md, *pngs]
