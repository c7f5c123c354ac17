"""Broker registration with a real NameServer: at once on topic changes, unique default
names, name clashes refused, unregistering on SIGTERM; ``rmq cluster up`` and the example."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import TopicNotFoundError
from broker_core.namesrv.client import NameServerClient
from broker_core.server.launcher import launch_broker
from examples import cluster as cluster_example
from tests.cluster.test_cluster import wait_for
from tests.cluster_procs import ROOT, start_cluster_broker, start_namesrv, stop_namesrv


@pytest.fixture(scope="module")
def namesrv() -> Iterator[str]:
    proc, addr = start_namesrv(scan_interval_ms=200, broker_expiry_ms=3_000)
    yield addr
    assert stop_namesrv(proc) == 0, "".join(proc.output[-30:])


def live_names(addr: str) -> set[str]:
    client = NameServerClient(addr)
    try:
        return {b.broker_name for b in client.get_cluster_info().live}
    finally:
        client.close()


def has_route(addr: str, topic: str) -> bool:
    client = NameServerClient(addr)
    try:
        client.get_route(topic)
        return True
    except TopicNotFoundError:
        return False
    finally:
        client.close()


def test_topic_change_registers_at_once_and_sigterm_unregisters(namesrv, tmp_path) -> None:
    broker = start_cluster_broker(
        tmp_path / "slow", namesrv, "reg-slow", register_interval_ms=600_000
    )
    try:
        assert "reg-slow" in live_names(namesrv)  # the first registration precedes READY
        with RocketMQClient(broker.endpoint) as client:
            client.create_topic("reg-new", queues=2)
        wait_for(lambda: has_route(namesrv, "reg-new"), 5, "the new topic at the NameServer")
        with RocketMQClient(broker.endpoint) as client:
            client.delete_topic("reg-new")
        wait_for(lambda: not has_route(namesrv, "reg-new"), 5, "the deleted topic to go")
    finally:
        assert broker.stop() == 0, "".join(broker.output[-30:])
    assert "reg-slow" not in live_names(namesrv)  # unregistered before it exited


def test_default_names_are_unique_and_a_clash_is_refused(namesrv, tmp_path) -> None:
    first = start_cluster_broker(tmp_path / "one", namesrv)
    second = start_cluster_broker(tmp_path / "two", namesrv)
    try:
        names = {n for n in live_names(namesrv) if n.startswith("broker-")}
        assert len(names) >= 2
        taken = next(n for n in live_names(namesrv) if n.startswith("broker-"))
        with pytest.raises(RuntimeError, match=rf"broker name '{re.escape(taken)}' is already"):
            start_cluster_broker(tmp_path / "three", namesrv, taken)
    finally:
        assert first.stop() == 0 and second.stop() == 0


def test_cluster_flags_need_namesrv(tmp_path) -> None:
    with pytest.raises(RuntimeError, match="--cluster need"):
        launch_broker(tmp_path, extra_args=["--cluster", "Other"])


def test_rmq_cluster_up_serves_until_sigterm(tmp_path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from broker_core.cli import main; main()",
            "cluster",
            "up",
            "--brokers",
            "2",
            "--dir",
            str(tmp_path),
            "--register-interval-ms",
            "500",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "READY":
                break
        namesrv = next(line.split()[1] for line in lines if line.startswith("namesrv "))
        brokers = {line.split()[1] for line in lines if line.startswith("broker ")}
        assert brokers == {"broker-a", "broker-b"} <= live_names(namesrv), lines
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_cluster_example_runs(tmp_path: Path) -> None:
    counts = cluster_example.run(tmp_path)
    assert sum(counts.values()) == cluster_example.COUNT
    assert set(counts) == {"broker-a", "broker-b"} and min(counts.values()) > 0


def test_wildcard_listen_needs_advertise_in_a_cluster(namesrv, tmp_path) -> None:
    with pytest.raises(RuntimeError, match="give --advertise HOST:PORT with --namesrv"):
        launch_broker(tmp_path, listen="0.0.0.0:0", extra_args=["--namesrv", namesrv])
