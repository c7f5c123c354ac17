"""python-load's figures (``bench/python_peer.py``) and its sending threads, against a
real broker of ours; the comparison with RocketMQ's proxy is in ``test_bench_peers.py``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench import goals, python_peer
from bench.java_load import LoadError
from bench.python_peer import details_of, threads_of_sends


def _side(rate: float, drain_error: str = "") -> dict[str, Any]:
    drain = {"error": drain_error} if drain_error else {"msg_s": rate * 4, "read": 100}
    return {
        "official": {"msg_s": rate, "p50_ms": 1.0, "p99_ms": 2.0, "errors": 0},
        "single": {"msg_s": rate * 2, "p50_ms": 1.0, "p99_ms": 2.0, "errors": 0},
        "batch": {"msg_s": rate * 3},
        "drain": drain,
    }


def test_details_give_each_case_a_ratio_and_leave_a_refused_case_out() -> None:
    found = {"ours": _side(1000.0), "rocketmq": _side(2000.0, drain_error="Unsupported: x")}
    details = details_of(found, "5.5.0")
    assert details["rocketmq_ratio"] == 0.5 and details["rocketmq_official_ratio"] == 0.5
    assert details["rocketmq_batch_ratio"] == 0.5
    assert "rocketmq_drain_ratio" not in details
    assert details["rocketmq_drain_error"] == "Unsupported: x"
    assert [c["case"] for c in details["peer_cases"]] == [
        python_peer.CASES[c] for c in ("official", "single", "batch")
    ]
    row = [g for g in goals.rows([{"workload": "python-load", "details": details}])][2]
    assert "official Python" in row.workload and row.met is False and row.ratio == "0.500"


def test_it_refuses_to_run_without_its_peer() -> None:
    with pytest.raises(LoadError, match="cannot run with --peer none"):
        python_peer.run("tiny", ())


def test_the_sending_threads_count_sends_and_name_the_first_error(tmp_path: Path) -> None:
    calls: list[int] = []

    def send() -> None:
        time.sleep(0.001)  # each send takes at least 1 ms: p50 cannot round to 0
        calls.append(1)
        if len(calls) % 50 == 0:
            raise RuntimeError("refused")

    figures = threads_of_sends(send, 0.05, 0.2)
    assert figures["msg_s"] > 0 and figures["errors"] > 0
    assert figures["first_error"] == "RuntimeError: refused"
    assert 0 < figures["p50_ms"] <= figures["p99_ms"]
