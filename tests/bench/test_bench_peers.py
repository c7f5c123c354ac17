"""The tiny bench run with its real JVM peers (slow: ``./dev chaos``): spark-read and
spark-write beside a real Kafka through Spark's Kafka connector, java-load against Apache
RocketMQ, and the peer table and plot they feed. ``test_bench_smoke.py`` runs the same
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
        timeout=3_600,  # a hang guard: every workload, two Kafka nodes, RocketMQ
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
