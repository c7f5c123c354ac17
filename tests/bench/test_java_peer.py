"""java-batch and java-latency's parsing, figures, peer-table rows and curve plot
(``bench/java_peer.py``), and issue 27's goals table (``bench/goals.py``). The runs
themselves need Apache RocketMQ: ``test_bench_peers.py`` (slow) runs them tiny."""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import Any

import pytest

from bench import all as run_all
from bench import docs, goals, java_peer, plots
from bench.java_load import LoadError
from bench.java_peer import batch_details, latency_details, parse_events

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(java_peer).failed == 0
    assert doctest.testmod(goals).failed == 0


def test_an_error_event_or_no_event_is_an_error_naming_why() -> None:
    with pytest.raises(LoadError, match="did not start: MQClientException: No route"):
        parse_events('{"event":"error","type":"MQClientException","message":"No route"}\n')
    with pytest.raises(LoadError, match="printed no figures"):
        parse_events("Exception in thread main\n")


def _load(rate: float) -> dict[str, Any]:
    return {"event": "load", "msg_s": rate, "p50_ms": 1.0, "p99_ms": 3.0, "errors": 0}


def _batch_found() -> dict[str, dict[str, Any]]:
    def side(scale: float) -> dict[str, Any]:
        return {
            "batch": _load(10_000 * scale),
            "topics64": _load(8_000 * scale),
            "topics256": _load(6_000 * scale),
            "drain": {"event": "drain", "msg_s": 20_000 * scale, "bad": 0},
        }

    return {"ours": side(1.0), "rocketmq": side(2.0)}


def test_batch_details_carry_each_case_per_side_and_a_peer_row_each() -> None:
    details = batch_details(_batch_found(), "5.5.0")
    assert details["rocketmq_ratio"] == 0.5 and details["rocketmq_batch_msg_s"] == 20_000
    assert details["rocketmq_drain_ratio"] == 0.5 and details["ours_drain_msg_s"] == 20_000
    assert details["ours_topics_256_over_64"] == 0.75
    assert details["ours_batch_p99_ms"] == 3.0 and details["rocketmq_drain_bad"] == 0
    cases = details["peer_cases"]
    assert [c["theirs"] for c in cases] == [20_000, 16_000, 12_000, 40_000]
    assert all(c["peer"] == "rocketmq" and c["unit"] == "msg/s" for c in cases)


def test_a_drain_that_read_part_of_the_fill_is_no_figure() -> None:
    found = _batch_found()
    found["rocketmq"]["drain"] |= {"read": 0, "filled": 100, "first_error": "held 0 of 100"}
    details = batch_details(found, "5.5.0")
    assert "rocketmq_drain_msg_s" not in details and "rocketmq_drain_ratio" not in details
    assert details["rocketmq_drain_error"] == "read 0 of 100 messages: held 0 of 100"
    assert [c["theirs"] for c in details["peer_cases"]] == [20_000, 16_000, 12_000]
    assert "RocketMQ drain" not in details["figures"] and "ours drain" in details["figures"]


def _step(name: str, rate: float, p99: float) -> dict[str, Any]:
    return {
        "event": "step",
        "step": name,
        "sent_msg_s": rate,
        "received_msg_s": rate,
        "backlog": 1,
        "p50_ms": p99 / 4,
        "p99_ms": p99,
        "p999_ms": p99 * 2,
    }


def _sweep(sustained: float, p99_at_goal: float, sent_at_goal: float) -> dict[str, Any]:
    steps = {f"f{f}": _step(f"f{f}", sustained * f, 1.0 + f) for f in java_peer.FRACTIONS}
    steps["max"] = _step("max", sustained, 50.0)
    steps["r5000"] = _step("r5000", sent_at_goal, p99_at_goal)
    return {"steps": steps, "sustained_msg_s": sustained}


def test_latency_details_give_the_curve_and_the_figures_at_5k() -> None:
    found = {"ours": _sweep(6000, 4.0, 5000), "rocketmq": _sweep(20000, 2.5, 5000)}
    details = latency_details(found, "5.5.0")
    assert details["ours_p99_at_5000_ms"] == 4.0 and details["rocketmq_p99_ms"] == 2.5
    assert details["rocketmq_ratio"] == 1.6
    assert [p["step"] for p in details["curve"]["ours"]] == ["f0.1", "f0.5", "f0.8", "f1.0"]
    assert [p["msg_s"] for p in details["curve"]["rocketmq"]] == [2000, 10000, 16000, 20000]
    assert details["ours_sustained_msg_s"] == 6000
    p99_row, rate_row = details["peer_cases"]
    assert p99_row["higher_is_better"] is False and p99_row["unit"] == "ms"
    assert rate_row["ours"] == 6000 and rate_row["theirs"] == 20000


def test_both_refuse_to_run_without_their_peer() -> None:
    with pytest.raises(LoadError, match="cannot run with --peer none"):
        java_peer.run_batch("tiny", ())
    with pytest.raises(LoadError, match="cannot run with --peer none"):
        java_peer.run_latency("tiny", ())
    left = run_all.workloads(no_peers=True)
    assert "java-batch" not in left and "java-latency" not in left
    assert {"java-batch", "java-latency"} <= set(run_all.workloads(no_peers=False))


def _result(workload: str, ours: float, details: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"workload": workload, "ours": ours, "details": details, **extra}


def test_the_goals_table_says_not_measured_for_what_did_not_run() -> None:
    table = goals.rows([])
    assert all(g.met is None and "not measured" in g.line() for g in table)
    assert len(table) == 9


def test_the_goals_table_judges_each_row_from_the_json() -> None:
    found = {"ours": _sweep(6000, 4.0, 5000), "rocketmq": _sweep(20000, 2.5, 5000)}
    results = [
        _result(
            "java-load",
            4000,
            {
                "ours_4x_128b_msg_s": 4000,
                "rocketmq_4x_128b_msg_s": 16000,
                "ours_5x_128b_msg_s": 3000,
                "rocketmq_5x_128b_msg_s": 5000,
            },
        ),
        _result("java-latency", 4.0, latency_details(found, "5.5.0")),
        _result("spark-read", 500_000, {"kafka_rows_s": 400_000}),
        _result("spark-write", 100_000, {"kafka_rows_s": 400_000}),
        _result("java-batch", 10_000, batch_details(_batch_found(), "5.5.0")),
    ]
    cost = {"broker_core": {"official_send_1": 18.0, "remoting_send_1": 30.0, "store_put_1": 4}}
    table = goals.rows(results, cost)

    def row(text: str) -> goals.Goal:
        (found_row,) = [g for g in table if text in g.workload]
        return found_row

    assert row("Java 4.x client, 128 B").met is False
    assert row("Java 4.x client, 128 B").ratio == "0.250"
    assert row("Java 5.x").met is True and row("Java 5.x").ratio == "0.600"
    assert row("official Python").met is None and row("official Python").ours == goals.NOT_MEASURED
    assert row("send→receive latency").met is True  # 4 ms ≤ 5, 1.6× ≤ 2×
    assert row("CPU per call").met is False and "18 / 30 / 4 µs" in row("CPU per call").line()
    assert row("spark-read").met is True and row("spark-write").met is False
    assert row("batch produce").ratio == "0.500" and row("consume (drain)").met is False


def test_latency_at_5k_is_not_met_when_ours_did_not_reach_the_rate() -> None:
    found = {"ours": _sweep(3000, 1.0, 3000), "rocketmq": _sweep(20000, 2.5, 5000)}
    row = goals.rows([_result("java-latency", 1.0, latency_details(found, "5.5.0"))])[3]
    assert row.met is False and "ours sent 3,000 msg/s" in row.ours


def test_the_docs_have_a_peer_row_per_case_the_goals_and_the_curve(tmp_path: Path) -> None:
    found = {"ours": _sweep(6000, 4.0, 5000), "rocketmq": _sweep(20000, 2.5, 5000)}
    results = [
        _result(
            "java-batch",
            10_000,
            batch_details(_batch_found(), "5.5.0"),
            baseline=20_000,
            unit="msg/s",
            ratio=0.5,
            goal=1.0,
            meets_goal=False,
        ),
        _result(
            "java-latency",
            4.0,
            latency_details(found, "5.5.0"),
            baseline=2.5,
            unit="ms",
            ratio=1.6,
            goal=5.0,
            goal_on="ours",
            higher_is_better=False,
            meets_goal=True,
        ),
    ]
    text = docs.markdown(results, "tiny", [])
    assert "| java-batch: consume: drain by pull from offset 0, 8 threads, Java 4.x |" in text
    assert "| java-latency: send→receive p99 at 5,000 msg/s offered" in text
    assert "## Speed goals (issue 27)" in text and "| not measured |" in text
    png = plots.latency_curve(results, tmp_path / "curve.png")
    assert png is not None and png.read_bytes()[:8] == PNG_MAGIC
    assert plots.latency_curve(results[:1], tmp_path / "none.png") is None
