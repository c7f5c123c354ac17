"""Benchmarks are not tests; this only checks each workload runs tiny and emits its JSON.

One ``python -m bench all --size tiny --peer none --out TMP`` run (module fixture) runs
every workload as its own ``python -m bench WORKLOAD --json --size tiny`` subprocess and
saves their JSON results; the per-workload tests check those results, the last test the
docs it wrote. Running everything once keeps the module to a few minutes on two cores.
The JVM peers (Kafka beside spark-read/spark-write, Apache RocketMQ for java-load) are
left out here: ``test_bench_peers.py`` (slow, ``./dev chaos``) runs the same with them,
and ``tests/peers`` starts each in the normal suite so that path never rots.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import docs
from bench.__main__ import WORKLOADS
from bench.all import workloads

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench-docs")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "all",
            "--size",
            "tiny",
            "--peer",
            "none",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1_800,  # a hang guard: every workload on a loaded machine
    )
    saved = out / "bench" / "results.json"
    assert saved.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    results = {r["workload"]: r for r in json.loads(saved.read_text())}
    return out, results, done.stdout + done.stderr


def test_every_workload_is_in_the_all_run() -> None:
    assert set(docs.ORDER) == set(WORKLOADS)


@pytest.mark.parametrize("workload", workloads(no_peers=True))
def test_workload_runs_tiny_and_ends_with_a_json_result(
    workload: str, tiny_run: tuple[Path, dict[str, Any], str]
) -> None:
    _, results, output = tiny_run
    result = results[workload]
    assert "error" not in result, result.get("error")
    assert result["workload"] == workload
    assert result["ours"] > 0 and result["baseline"] > 0
    assert result["ratio"] == pytest.approx(result["ours"] / result["baseline"], rel=0.01, abs=1e-3)
    assert {"unit", "goal", "goal_text", "details", "machine", "checks"} <= set(result)
    judged = result["ratio"] if result["goal_on"] == "ratio" else result["ours"]
    main_goal = judged >= result["goal"] if result["higher_is_better"] else judged <= result["goal"]
    assert result["meets_goal"] == (main_goal and all(result["checks"].values()))
    assert f"== {workload} ==" in output  # its readable table was echoed


def test_latency_and_backlog_report_percentiles(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, _ = tiny_run
    latency, backlog = results["latency"]["details"], results["backlog"]["details"]
    for side in (latency["ours_ms"], latency["redis_ms"], backlog["small_ms"], backlog["large_ms"]):
        assert 0 < side["p50"] <= side["p99"] <= side["p999"]
    assert results["latency"]["ours"] == latency["ours_ms"]["p99"]
    assert backlog["rss_large_bytes"]["VmRSS"] > 0
    assert results["produce"]["details"]["jetstream_msg_s"] > 0


def test_all_writes_markdown_and_plots(tiny_run: tuple[Path, dict[str, Any], str]) -> None:
    out, _, _ = tiny_run
    text = (out / "BENCHMARKS.md").read_text()
    for workload in workloads(no_peers=True):
        assert f"| {workload} |" in text, workload
    for needle in ("redis-server --version", "nats-server --version", "## Machine", "RAM"):
        assert needle in text
    for name in ("ratios", "throughput", "latency"):
        png = out / "bench" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert png.stat().st_size > 10_000  # a drawn chart, not an empty canvas
        assert f"(bench/{name}.png)" in text


def test_markdown_keeps_the_hand_written_notes() -> None:
    notes = (ROOT / "bench" / "NOTES.md").read_text().strip()
    text = docs.markdown([], "full", [])
    assert notes.splitlines()[0] in text and notes.splitlines()[-1] in text
    assert text.index(notes.splitlines()[0]) < text.index("## Peers")


def test_docs_can_be_redrawn_from_saved_results(
    tiny_run: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    out, results, _ = tiny_run
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "all",
            "--out",
            str(tmp_path),
            "--from-json",
            str(out / "bench" / "results.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "smoke run" in text  # the saved results know they were tiny
    for workload, result in results.items():
        assert f"| {workload} | {docs.WHAT[workload]} | {docs.fmt(result['ours'])} |" in text
    assert "summary:" in done.stdout


def test_all_writes_issue_27s_goals_table_with_our_cpu_per_call(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    out, _, _ = tiny_run
    text = (out / "BENCHMARKS.md").read_text()
    cost = json.loads((out / "bench" / docs.SEND_COST_FILE).read_text())["broker_core"]
    table = text[text.index("## Speed goals (issue 27)") : text.index("## Conditions")]
    cpu = next(line for line in table.splitlines() if "our CPU per call" in line)
    assert f"{cost['official_send_1']:g} / " in cpu
    # the peers did not run: their goals say so instead of a figure
    java4 = next(line for line in table.splitlines() if "Java 4.x client, 128 B" in line)
    assert java4.endswith("| not measured |")
