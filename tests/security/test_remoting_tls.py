"""TLS on the remoting ports: a TLS NameServer, a TLS broker registering with it, routes
read over TLS; plaintext and untrusted clients are refused and the servers keep serving."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import RemotingConnectError
from broker_core.namesrv.client import NameServerClient
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.tls import client_context
from broker_core.server.launcher import ROOT
from tests.cluster_procs import NamesrvProcess, start_namesrv, stop_namesrv
from tests.security.conftest import start_with
from tests.security.pki import Pki, make_pki, tls_toml
from tests.server.conftest import BrokerProcess


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("remoting-pki"))


@pytest.fixture(scope="module")
def tls_namesrv(pki: Pki) -> Iterator[str]:
    proc: NamesrvProcess
    proc, addr = start_namesrv(
        extra_args=["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    )
    yield addr
    assert stop_namesrv(proc) == 0, "".join(proc.output[-40:])


@pytest.fixture(scope="module")
def tls_member(tmp_path_factory, pki: Pki, tls_namesrv: str) -> Iterator[BrokerProcess]:
    proc = start_with(
        tmp_path_factory.mktemp("tls-member"),
        extra_toml=tls_toml(pki),
        extra_args=[
            "--namesrv",
            tls_namesrv,
            "--remoting-listen",
            "127.0.0.1:0",
            "--register-interval-ms",
            "500",
        ],
        env={"RMQ_CA_FILE": str(pki.ca)},
    )
    yield proc
    proc.stop()


def _ping(addr: str, **kwargs) -> int:
    """One request over a fresh connection; the response code (3: code not supported)."""
    client = RemotingClient(addr, timeout_s=5.0, **kwargs)
    try:
        return client.invoke(RemotingCommand.request(9999)).code
    finally:
        client.close()


def test_tls_broker_registers_and_routes_are_read_over_tls(
    pki: Pki, tls_namesrv: str, tls_member: BrokerProcess
) -> None:
    with RocketMQClient(tls_member.endpoint, ca_file=str(pki.ca)) as admin:
        admin.create_topic("tls-routed", queues=2)
    client = NameServerClient(tls_namesrv, ssl_context=client_context(str(pki.ca)))
    try:
        deadline = time.monotonic() + 20.0
        while "tls-routed" not in client.get_all_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        brokers = client.get_cluster_info().brokers
        assert len(brokers) == 1, brokers
        (data,) = brokers.values()
        remoting_addr = data.broker_addrs[0]
        route = client.get_route("tls-routed")
        assert route.broker_datas[0].broker_addrs == {0: remoting_addr}
    finally:
        client.close()
    # the broker's own remoting listener serves TLS too, and refuses plain TCP
    assert _ping(remoting_addr, ssl_context=client_context(str(pki.ca))) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    )
    with pytest.raises(RemotingConnectError):
        _ping(remoting_addr)


def test_plaintext_client_is_refused_and_the_server_keeps_serving(
    pki: Pki, tls_namesrv: str
) -> None:
    with pytest.raises(RemotingConnectError):
        _ping(tls_namesrv)
    secure = NameServerClient(tls_namesrv, ssl_context=client_context(str(pki.ca)))
    try:
        assert isinstance(secure.get_all_topics(), list)
    finally:
        secure.close()


def test_untrusted_certificate_is_refused(tmp_path: Path, pki: Pki, tls_namesrv: str) -> None:
    other = make_pki(tmp_path / "other")
    with pytest.raises(RemotingConnectError, match="TLS handshake"):
        _ping(tls_namesrv, ssl_context=client_context(str(other.ca)))
    assert _ping(tls_namesrv, ssl_context=client_context(str(pki.ca))) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    )


def test_namesrv_with_tls_ca_requires_a_client_certificate(pki: Pki) -> None:
    flags = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    proc, addr = start_namesrv(extra_args=[*flags, "--tls-ca", str(pki.ca)])
    try:
        with pytest.raises(RemotingConnectError):
            _ping(addr, ssl_context=client_context(str(pki.ca)))
        with_cert = client_context(str(pki.ca), str(pki.client_cert), str(pki.client_key))
        assert _ping(addr, ssl_context=with_cert) == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        assert stop_namesrv(proc) == 0, "".join(proc.output[-40:])


def test_rmq_namesrv_start_serves_tls(pki: Pki) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from broker_core.cli import main; main()",
            "namesrv",
            "start",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        addr = proc.stdout.readline().split()[1]  # READY host:port
        assert _ping(addr, ssl_context=client_context(str(pki.ca))) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        )
        with pytest.raises(RemotingConnectError):
            _ping(addr)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_namesrv_tls_flags_are_checked(pki: Pki) -> None:
    from broker_core.errors import ConfigError
    from broker_core.namesrv.server import run

    with pytest.raises(ConfigError, match="give both --tls-cert and --tls-key"):
        run(["--listen", "127.0.0.1:0", "--tls-cert", str(pki.server_cert)])
    with pytest.raises(ConfigError, match="cannot load"):
        run(["--listen", "127.0.0.1:0", "--tls-cert", str(pki.ca), "--tls-key", str(pki.ca)])
