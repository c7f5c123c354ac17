"""The tiny bench run with its real JVM peers (slow: ``./dev chaos``): spark-read and
spark-write beside a real Kafka through Spark's Kafka connector, java-load, java-batch,
java-latency and python-load against Apache RocketMQ, and the peer table, the goals table
and the plots they feed. ``test_bench_smoke.py`` runs the same
workloads without the peers in the normal suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.real_peers import WORKLOAD_PEERS

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench-peers")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--size", "tiny", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=5_400,  # a hang guard: every workload, two Kafka nodes, RocketMQ 4 times
    )
    saved = out / "bench" / "results.json"
    assert saved.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    results = {r["workload"]: r for r in json.loads(saved.read_text())}
    for workload in WORKLOAD_PEERS:
        assert "error" not in results[workload], results[workload].get("error")
    return out, results, done.stdout + done.stderr


def test_spark_workloads_ran_beside_a_real_kafka(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, output = tiny_run
    for workload in ("spark-read", "spark-write"):
        result, details = results[workload], results[workload]["details"]
        assert details["kafka_rows_s"] > 0
        assert details["kafka_ratio"] == pytest.approx(
            result["ours"] / details["kafka_rows_s"], rel=0.01, abs=1e-3
        )
        assert details["kafka_version"].startswith("4.")
        assert details["figures"]["Kafka"] == details["kafka_rows_s"]
    assert "format('kafka') read" in output and "format('kafka') write" in output


def test_java_load_ran_both_clients_against_both_brokers(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, _ = tiny_run
    result, details = results["java-load"], results["java-load"]["details"]
    for side in ("ours", "rocketmq"):
        for case in ("4x_128b", "5x_128b"):
            assert details[f"{side}_{case}_msg_s"] > 0
            assert 0 < details[f"{side}_{case}_p50_ms"] <= details[f"{side}_{case}_p99_ms"]
    assert details["rocketmq_ratio"] == pytest.approx(
        result["ours"] / details["rocketmq_4x_128b_msg_s"], rel=0.01, abs=1e-3
    )
    assert details["rocketmq_version"].startswith("5.")


def test_the_docs_have_the_peer_table_and_plot(tiny_run: tuple[Path, dict[str, Any], str]) -> None:
    out, _, _ = tiny_run
    text = (out / "BENCHMARKS.md").read_text()
    assert "## Against the real peers" in text and "kafka_2.13 (Maven): 4." in text
    for workload in ("spark-read", "spark-write"):
        assert f"| {workload} | Kafka 4." in text
    assert "| java-load | RocketMQ 5." in text and "rocketmq-client-java (Maven): 5." in text
    png = out / "bench" / "peers.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert "(bench/peers.png)" in text


def test_java_batch_ran_every_case_on_both_brokers(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, _ = tiny_run
    result, details = results["java-batch"], results["java-batch"]["details"]
    for side in ("ours", "rocketmq"):
        for case in ("batch", "topics64", "topics256", "drain"):
            assert details[f"{side}_{case}_msg_s"] > 0, (side, case)
        assert details[f"{side}_drain_bad"] == 0
    assert details["ours_batch_errors"] == 0  # a loaded RocketMQ may refuse some (busy)
    assert details["rocketmq_ratio"] == pytest.approx(
        result["ours"] / details["rocketmq_batch_msg_s"], rel=0.01, abs=1e-3
    )
    assert len(details["peer_cases"]) == 4


def test_java_latency_swept_both_brokers_with_the_same_load(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, _ = tiny_run
    result, details = results["java-latency"], results["java-latency"]["details"]
    for side in ("ours", "rocketmq"):
        assert details[f"{side}_sustained_msg_s"] > 0
        curve = details["curve"][side]
        assert [p["step"] for p in curve] == ["f0.1", "f0.5", "f0.8", "f1.0"]
        for point in curve:
            assert point["msg_s"] > 0 and 0 < point["p50"] <= point["p99"] <= point["p999"]
    assert result["ours"] == details["ours_p99_at_5000_ms"] > 0
    assert result["baseline"] == details["rocketmq_p99_at_5000_ms"] > 0


def test_python_load_ran_the_official_client_against_both(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    _, results, _ = tiny_run
    details = results["python-load"]["details"]
    for side in ("ours", "rocketmq"):
        assert details[f"{side}_official_msg_s"] > 0 and details[f"{side}_official_errors"] == 0
    assert details["rocketmq_ratio"] == details["rocketmq_official_ratio"] > 0


def test_the_docs_have_a_row_per_case_the_goals_and_the_curve(
    tiny_run: tuple[Path, dict[str, Any], str],
) -> None:
    out, _, _ = tiny_run
    text = (out / "BENCHMARKS.md").read_text()
    assert "| java-batch: consume: drain by pull from offset 0, 8 threads, Java 4.x |" in text
    assert "| java-latency: send→receive p99 at 5,000 msg/s offered" in text
    assert "| python-load: single sends, 16 threads, official Python client |" in text
    table = text[text.index("## Speed goals (issue 27)") : text.index("## Conditions")]
    for goal in ("Java 4.x client, 128 B", "Java 5.x", "official Python", "Java load at 5,000"):
        line = next(ln for ln in table.splitlines() if goal in ln)
        assert "not measured" not in line, line
    png = out / "bench" / "latency_curve.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and "(bench/latency_curve.png)" in text
