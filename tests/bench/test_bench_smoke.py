"""Benchmarks are not tests; this only checks each workload runs tiny and emits its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workload", ["store-append", "produce", "spark-read", "spark-write"])
def test_workload_runs_tiny_and_ends_with_a_json_result(workload: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", workload, "--json", "--size", "tiny"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["workload"] == workload
    assert result["ours"] > 0 and result["baseline"] > 0
    assert result["ratio"] == pytest.approx(result["ours"] / result["baseline"], rel=0.01)
    assert {"unit", "goal", "details"} <= set(result)
