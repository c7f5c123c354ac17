"""``rmq cluster up`` as a user runs it (issue 30, defects 1, 6 and 10): it supervises its
brokers instead of stopping at the first death, takes the README's ports when free and
others when not, tells the CLI where it runs, and keeps its files small and tidy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.cluster.local import SMALL_STORE
from broker_core.cluster.ports import PortAllocator, PortPlan
from broker_core.server.launcher import ROOT
from tests.cluster.up_procs import FREE_PORTS, RMQ, ClusterUp


def test_a_dead_broker_is_reported_restarted_and_the_others_keep_serving(tmp_path: Path) -> None:
    up = ClusterUp.start(tmp_path / "c", "--brokers", "2", "--restart")
    try:
        brokers = up.endpoints()["brokers"]
        a, b = brokers["broker-a"], brokers["broker-b"]
        with RocketMQClient(a["grpc"]) as client:
            client.create_topic("up-a", queues=1)
            client.send("up-a", b"before")
        os.kill(a["pid"], signal.SIGKILL)
        up.wait_line(lambda line: line == "exited broker-a -9", 30, "reporting broker-a's death")
        assert up.process.poll() is None  # before: "broker(s) broker-a exited; cluster stopped"
        with RocketMQClient(b["grpc"]) as client:
            client.create_topic("up-b", queues=1)
            assert client.send("up-b", b"b serves").offset == 0
        up.wait_line(lambda line: line.startswith("restarted broker-a"), 60, "a restart")
        assert up.endpoints()["brokers"]["broker-a"]["grpc"] == a["grpc"]  # same ports
        with RocketMQClient(a["grpc"]) as client:
            client.create_group("GID_up")
            assert [m.body for m in client.pull("GID_up", "up-a", 0, 0, 10).messages] == [b"before"]
        assert up.stop() == 0
        assert up.lines[-2:] == ["stopped", "<EOF>"], up.lines[-5:]
        assert not (tmp_path / "c" / "endpoints.json").exists()
    finally:
        up.kill()


def test_wanted_ports_when_free_others_when_taken_and_an_env_file_for_the_cli(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        up = ClusterUp.start(tmp_path / "c", "--brokers", "1", "--namesrv-port", str(busy))
        try:
            namesrv = up.printed["namesrv"][0]
            assert namesrv != f"127.0.0.1:{busy}"
            assert up.printed["port"] == [f"{busy} taken: {namesrv.rpartition(':')[2]}"]
            doc = up.endpoints()
            assert doc["namesrv"] == namesrv
            env_lines = (tmp_path / "c" / "env").read_text().splitlines()
            env = dict(line.removeprefix("export ").split("=", 1) for line in env_lines)
            assert env["RMQ_NAMESRV"] == namesrv
            assert env["RMQ_ENDPOINTS"] == doc["brokers"]["broker-a"]["grpc"]
            listed = CliRunner(env={**env, "COLUMNS": "250"}).invoke(cli, ["cluster", "list"])
            assert listed.exit_code == 0 and "broker-a" in listed.output, listed.output
            with RocketMQClient(env["RMQ_ENDPOINTS"]) as client:
                client.create_topic("up-small", queues=1)
                client.send("up-small", b"x")
            store = tmp_path / "c" / "broker-a" / "store"
            segments = list((store / "commitlog").iterdir())
            assert [p.stat().st_size for p in segments] == [SMALL_STORE["segment_size_bytes"]]
            [console] = up.printed["console"]  # the web console of the cluster (issue 29)
            with urllib.request.urlopen(console.rstrip("/") + "/api/topics", timeout=30) as answer:
                assert "up-small" in answer.read().decode()
            assert up.stop() == 0
        finally:
            up.kill()


def test_the_allocator_gives_each_wanted_port_once_and_counts_on_from_the_base() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = PortAllocator()
        first = ports.take(busy)
        assert first != busy and ports.fallbacks == [(busy, first)]
        assert ports.take(first) != first  # handed out already
        assert ports.take(0) not in (busy, first)
    assert PortPlan.readme() == PortPlan(9876, 8081, 10911, 2379)


def test_a_failed_start_removes_what_it_created(tmp_path: Path) -> None:
    target = tmp_path / "new"
    env = {**os.environ, "PATH": str(tmp_path / "nowhere")}  # no etcd on the PATH
    done = subprocess.run(
        [*RMQ, "cluster", "up", "--dir", str(target), "--controller", "--tls", *FREE_PORTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "needs etcd" in done.stderr, done.stderr
    assert not target.exists()  # before: namesrv.log and the TLS files stayed
