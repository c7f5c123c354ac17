"""The remoting listener of a broker process: on by default with NameServers (registered
as ``brokerAddr``, the gRPC endpoint as ``grpcAddr``), off without, refused when the port
asked for is taken."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from broker_core.cluster.local import LocalCluster
from broker_core.namesrv.client import NameServerClient
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand
from broker_core.server.launcher import ROOT, launch_broker


def test_default_listener_with_namesrv_is_registered_as_broker_addr(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path, register_interval_ms=500)
    local.start(1)
    try:
        names = NameServerClient(local.namesrv)
        try:
            data = names.get_cluster_info().brokers["broker-a"]
        finally:
            names.close()
        grpc_addr, remoting_addr = data.grpc_addrs[0], data.broker_addrs[0]
        assert grpc_addr == local.endpoints["broker-a"] and remoting_addr != grpc_addr
        client = RemotingClient(remoting_addr)
        try:  # it really is the broker's remoting port
            resp = client.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        finally:
            client.close()
        assert resp.code == 0 and b"broker-a" in resp.body
    finally:
        local.stop()


def test_no_listener_without_namesrv(tmp_path: Path) -> None:
    proc = launch_broker(tmp_path)
    try:
        assert not [x for x in proc.output if "remoting (4.x clients)" in x]
    finally:
        assert proc.stop() == 0


def test_a_taken_port_asked_for_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cmd = [
            str(Path(sys.executable).parent / "rmq"),
            "broker",
            "start",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            str(tmp_path / "s"),
            "--remoting-listen",
            f"127.0.0.1:{port}",
        ]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"--remoting-listen 127.0.0.1:{port}" in done.stderr + done.stdout
