"""``python -m bench all``: run every workload, then write BENCHMARKS.md and the plots.

Each workload runs as its own ``python -m bench WORKLOAD --json --size SIZE`` subprocess,
one after the other (a fresh interpreter each, so one workload's threads, page cache
habits or Spark JVM never leak into the next), with its output echoed as it comes. The
last JSON line of each is its result. Before each, ``os.sync()`` writes back what the
previous one left dirty (store-append leaves ~700 MB): otherwise the next workload runs
while the kernel flushes it (produce measured 152k msg/s right after store-append, 231–234k
alone). A workload that fails is recorded with the tail
of its output and the others still run; the exit code is then 1.

After the workloads, ``python -m bench.send_cost`` (our CPU per call, one of issue 27's
goals) runs too and its JSON goes to ``OUT/bench/send_cost.json`` for the goals table.

The results go to ``OUT/bench/results.json`` as well, and ``--from-json FILE...`` redraws
the docs from saved results (a results.json, or files of JSON lines as the workloads
print them) without running anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import docs, real_peers

TIMEOUT_S = {"tiny": 900, "full": 3_600}  # hang guards (tiny: JVM peers start too)


def run_one(workload: str, size: str, no_peers: bool = False) -> dict[str, Any]:
    """Run one workload in a subprocess; its JSON result, or ``{"workload", "error"}``."""
    cmd = [sys.executable, "-m", "bench", workload, "--json", "--size", size]
    cmd += ["--peer", "none"] if no_peers else []
    print(f"### {workload} ({size})", flush=True)
    os.sync()  # a quiet disk for each workload (see the module docstring)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    watchdog = threading.Timer(TIMEOUT_S[size], proc.kill)  # a hung workload still ends
    watchdog.start()
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if not line.startswith("{"):
                print(line, end="", flush=True)
        code = proc.wait()
    finally:
        watchdog.cancel()
    result = _last_result(lines, workload)
    if code != 0 or result is None:
        print(f"!!! {workload} failed (exit code {code})", flush=True)
        return {"workload": workload, "error": f"exit code {code}\n{_failure_text(lines)}"}
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    result["size"] = size
    return result


def _failure_text(lines: Sequence[str]) -> str:
    """The error lines (a JVM trace buries the Python one) and the output's tail."""
    errors = [
        ln
        for ln in lines
        if ("Error" in ln or "Exception" in ln) and not ln.lstrip().startswith("at ")
    ]
    return "".join([*dict.fromkeys(errors[:20]), "...\n", *lines[-30:]])


def _last_result(lines: Sequence[str], workload: str) -> dict[str, Any] | None:
    for line in reversed(lines):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.get("workload") == workload:
            return parsed
    return None


def send_cost(size: str, into: Path) -> None:
    """Run ``python -m bench.send_cost`` (our CPU per call, issue 27's goal) and save its
    JSON as ``into``; a failure leaves the goal "not measured" and is only reported."""
    rounds = "1" if size == "tiny" else "5"
    print("### send-cost", flush=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench.send_cost", "--rounds", rounds],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S[size],
        )
    except subprocess.TimeoutExpired:
        print("!!! send-cost ran over its time", flush=True)
        return
    text = done.stdout[done.stdout.find("{") :]
    try:
        parsed = json.loads(text)
    except ValueError:
        print(f"!!! send-cost printed no JSON:\n{done.stdout[-1000:]}{done.stderr[-1000:]}")
        return
    into.write_text(json.dumps(parsed, indent=1) + "\n")
    print(text, flush=True)


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Results from saved files: a JSON list, or one JSON object per line."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        text = path.read_text()
        try:
            items = json.loads(text)
            items = items if isinstance(items, list) else [items]
        except ValueError:
            items = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        for item in items:
            found[item["workload"]] = item  # a later file wins
    return [found[w] for w in docs.ORDER if w in found] + [
        r for w, r in found.items() if w not in docs.ORDER
    ]


def workloads(no_peers: bool) -> list[str]:
    """The workloads ``all`` runs: every one, less those that only compare with a peer
    (``real_peers.PEER_ONLY``) when the peers are left out."""
    return [w for w in docs.ORDER if not (no_peers and w in real_peers.PEER_ONLY)]


def main(size: str, out: Path, from_json: Sequence[Path] = (), no_peers: bool = False) -> int:
    """Run (or load) every result and write the docs under ``out``; 0 if none failed.
    ``no_peers``: run each workload without its real peers (``--peer none``)."""
    order = workloads(no_peers)
    results = load(from_json) if from_json else [run_one(w, size, no_peers) for w in order]
    sizes = {r.get("size", size) for r in results}
    size = sizes.pop() if len(sizes) == 1 else size  # saved results know their size
    (out / "bench").mkdir(parents=True, exist_ok=True)
    if not from_json:
        (out / "bench" / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        send_cost(size, out / "bench" / docs.SEND_COST_FILE)
    written = docs.write(results, out, size)
    print("\n".join(["wrote:", *(f"  {p}" for p in written)]))
    summary = [
        f"  {r['workload']:<13} "
        + (
            "FAILED"
            if "error" in r
            else f"ratio {r['ratio']:.3f}  {r['goal_text']}: "
            f"{'met' if r['meets_goal'] else 'NOT met'}"
        )
        for r in results
    ]
    print("\n".join(["summary:", *summary]))
    return 1 if any("error" in r for r in results) else 0
