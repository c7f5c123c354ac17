"""``rmq cluster up --tls``: a throwaway CA, TLS everywhere, metrics on every broker."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from broker_core.client import RocketMQClient
from broker_core.namesrv.client import NameServerClient
from broker_core.remoting.tls import client_context
from broker_core.server.launcher import ROOT
from tests.cluster.up_procs import FREE_PORTS


def _up(tmp_path: Path) -> tuple[subprocess.Popen[str], dict[str, list[str]]]:
    """Start ``rmq cluster up --brokers 1 --tls``; its printed lines by first word."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from broker_core.cli import main; main()",
            "cluster",
            "up",
            "--brokers",
            "1",
            "--tls",
            "--dir",
            str(tmp_path),
            "--register-interval-ms",
            "500",
            *FREE_PORTS,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    printed: dict[str, list[str]] = {}
    for line in proc.stdout:
        if line.strip() == "READY":
            return proc, printed
        word, _, rest = line.strip().partition(" ")
        printed.setdefault(word, []).append(rest)
    raise AssertionError(f"cluster up ended before READY: {printed}")


def _scrape(url: str, timeout_s: float = 10.0) -> str:
    """GET ``url``'s body (status 200)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        return str(response.read().decode())


def test_cluster_up_tls_serves_tls_and_metrics(tmp_path: Path) -> None:
    proc, printed = _up(tmp_path)
    try:
        ca = printed["ca"][0]
        assert f"RMQ_CA_FILE={ca}" in printed["export"][0]
        assert f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca}" in printed["export"][0]
        name, endpoint = printed["broker"][0].split()
        with RocketMQClient(endpoint, ca_file=ca) as client:
            client.create_topic("up-tls", queues=1)
            client.create_group("GID_up_tls")
            client.send_batch("up-tls", [(b"one",), (b"two",)])
            batch = client.pull("GID_up_tls", "up-tls", 0, 0, 10)
            assert [m.body for m in batch.messages] == [b"one", b"two"]
        with RocketMQClient(namesrv=printed["namesrv"][0], ca_file=ca) as routed:
            assert routed.send("up-tls", b"three").offset == 2  # route read over TLS
        namesrv = NameServerClient(printed["namesrv"][0], ssl_context=client_context(ca))
        try:
            assert name in namesrv.get_cluster_info().brokers
        finally:
            namesrv.close()
        metrics_name, url = printed["metrics"][0].split()
        assert metrics_name == name
        text = _scrape(url)
        assert "rocketmq_messages_in_total{" in text and 'topic="up-tls"' in text, text[:2000]
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
