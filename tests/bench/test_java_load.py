"""The java-load workload's parsing and figures (``bench/java_load.py``); the run itself
is in the bench smoke (``tests/bench/test_bench_smoke.py``, both brokers, tiny)."""

from __future__ import annotations

import doctest

import pytest

from bench import all as run_all
from bench import java_load
from bench.java_load import LoadError, LoadFigures, details_of, parse_load


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(java_load).failed == 0


def test_the_figures_line_is_found_among_the_clients_log_lines() -> None:
    out = (
        "SLF4J: no binder\n"
        '{"event":"load","client":"5.x","threads":16,"body_bytes":1024,"sent":400,'
        '"errors":2,"seconds":2.001,"msg_s":199.9,"p50_ms":70.5,"p99_ms":120.25,'
        '"first_error":"RemotingTimeoutException: \\"slow\\""}\n'
        "shutdown hook ran\n"
    )
    figures = parse_load(out)
    assert figures == LoadFigures(
        "5.x", 199.9, 70.5, 120.25, 400, 2, 'RemotingTimeoutException: "slow"'
    )


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (
            '{"event":"error","type":"MQClientException","message":"No name server"}\n',
            "the producer did not start: MQClientException: No name server",
        ),
        ("Exception in thread main\n", "the load printed no figures"),
    ],
)
def test_a_run_without_figures_is_an_error_naming_why(out: str, message: str) -> None:
    with pytest.raises(LoadError, match=message):
        parse_load(out)


def test_details_carry_every_case_per_side_and_the_main_ratio() -> None:
    def figs(rate: float) -> LoadFigures:
        return LoadFigures("4.x", rate, 1.0, 4.0, int(rate), 0, "")

    found = {
        "4x_128b": {"ours": figs(3000.0), "rocketmq": figs(6000.0)},
        "5x_128b": {"ours": figs(2000.0), "rocketmq": figs(1000.0)},
    }
    details = details_of(found, "5.5.0")
    assert details["rocketmq_ratio"] == 0.5  # the main case: 4.x, 128 B
    assert details["rocketmq_msg_s"] == 6000
    assert details["rocketmq_5x_128b_ratio"] == 2.0
    assert details["ours_5x_128b_p99_ms"] == 4.0 and details["rocketmq_4x_128b_errors"] == 0
    assert details["rocketmq_version"] == "5.5.0" and details["threads"] == 16
    assert details["figures"] == {
        "ours 4x_128b": 3000,
        "RocketMQ 4x_128b": 6000,
        "ours 5x_128b": 2000,
        "RocketMQ 5x_128b": 1000,
    }


def test_it_refuses_to_run_without_its_peer() -> None:
    with pytest.raises(LoadError, match="cannot run with --peer none"):
        java_load.run("tiny", ())


def test_all_without_peers_leaves_java_load_out_and_keeps_the_rest() -> None:
    assert "java-load" in run_all.workloads(no_peers=False)
    without = run_all.workloads(no_peers=True)
    assert "java-load" not in without and "produce" in without and "spark-read" in without
