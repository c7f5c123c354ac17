"""Choosing the real peers a workload runs beside ours (``bench/real_peers.py``, issue 24)."""

from __future__ import annotations

import doctest

import pytest

from bench import real_peers
from bench.__main__ import PEER_WORKLOADS, WORKLOADS
from bench.__main__ import main as bench_main


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(real_peers).failed == 0


def test_a_workload_runs_every_peer_it_has_unless_told_otherwise() -> None:
    assert real_peers.choose("spark-write", []) == ("kafka",)
    assert real_peers.choose("spark-write", ["kafka", "kafka"]) == ("kafka",)
    assert real_peers.choose("spark-write", ["none"]) == ()
    assert real_peers.choose("consume", []) == ()


def test_every_workload_with_peers_takes_them() -> None:
    assert set(real_peers.WORKLOAD_PEERS) == set(PEER_WORKLOADS)
    assert set(PEER_WORKLOADS) <= set(WORKLOADS)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["produce", "--peer", "kafka"], "produce has no kafka side (it has none)"),
        (["spark-read", "--peer", "redpanda"], "unknown peer 'redpanda'"),
        (["all", "--peer", "kafka"], "all takes only --peer none"),
    ],
)
def test_a_peer_the_bench_cannot_run_is_refused_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_peer_ratios_are_read_from_the_prefixed_details() -> None:
    details = {"kafka_ratio": 0.25, "kafka_rows_s": 4, "rocketmq_ratio": 2, "other_ratio": 9}
    assert real_peers.ratios(details) == {"kafka": 0.25, "rocketmq": 2.0}
