"""``rmq`` against a TLS broker and NameServer: every path works with ``RMQ_CA_FILE``, and a
TLS mismatch says so instead of a bare "Socket closed".

One NameServer (in-process, TLS) and one broker process (``[tls]``, registered with the
NameServer over TLS) serve the module; a plain broker answers the mismatch the other way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from broker_core.auth.config import TlsConfig
from broker_core.cli import cli
from broker_core.namesrv.client import NameServerClient
from broker_core.namesrv.server import NameServer
from broker_core.remoting.tls import client_context, server_context
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.security.pki import Pki, make_pki
from tests.server.conftest import start_broker


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def namesrv(pki: Pki) -> Iterator[str]:
    tls = TlsConfig(str(pki.server_cert), str(pki.server_key))
    server = NameServer("127.0.0.1:0", ssl_context=server_context(tls))
    address = server.start()
    yield address
    server.stop()


def registered(namesrv: str, pki: Pki, timeout_s: float = 30.0) -> str:
    """The broker name once one has registered with ``namesrv`` (its first heartbeat)."""
    client = NameServerClient(namesrv, ssl_context=client_context(str(pki.ca)))
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            brokers = client.get_cluster_info().brokers
            if brokers:
                return next(iter(brokers))
            threading.Event().wait(0.1)
    finally:
        client.close()
    raise AssertionError(f"no broker registered with {namesrv} in {timeout_s} s")


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki: Pki, namesrv: str) -> Iterator[BrokerProcess]:
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    proc = launch_broker(
        tmp_path_factory.mktemp("tls"),
        config={"tls": tls, "broker": {"default_queue_nums": 2}},
        extra_args=["--namesrv", namesrv, "--register-interval-ms", "500"],
        env={"RMQ_CA_FILE": str(pki.ca)},  # registers with the NameServer over TLS
    )
    registered(namesrv, pki)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("plain"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def rmq(env: dict[str, Any], *args: str) -> Result:
    base = {"RMQ_CA_FILE": None, "RMQ_TLS": None, "RMQ_NAMESRV": None, "COLUMNS": "250"}
    return CliRunner(env={**base, **env}).invoke(cli, list(args), catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error:"), result.stderr
    return line


def test_every_endpoint_verb_works_over_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    env = {"RMQ_CA_FILE": str(pki.ca), "RMQ_ENDPOINTS": tls_broker.endpoint}
    ok(rmq(env, "topic", "create", "tls_cli", "--queues", "1"))
    assert "tls_cli" in ok(rmq(env, "topic", "list"))
    ok(rmq(env, "topic", "status", "tls_cli"))
    ok(rmq(env, "group", "create", "GID_tls_cli"))
    sent = ok(rmq(env, "send", "tls_cli", "over tls", "--keys", "k1"))
    assert "queue: 0" in sent, sent
    got = ok(
        rmq(env, "consume", "tls_cli", "--group", "GID_tls_cli", "--from", "earliest", "--max", "1")
    )
    assert "over tls" in got, got
    assert "tls_cli" in ok(rmq(env, "group", "progress", "GID_tls_cli"))
    assert "over tls" in ok(rmq(env, "message", "query", "--topic", "tls_cli", "--key", "k1"))


def test_namesrv_verbs_work_over_tls(tls_broker: BrokerProcess, pki: Pki, namesrv: str) -> None:
    env = {"RMQ_CA_FILE": str(pki.ca), "RMQ_ENDPOINTS": tls_broker.endpoint}
    ok(rmq(env, "topic", "create", "tls_everywhere", "--queues", "1", "--namesrv", namesrv))
    ok(rmq(env, "group", "create", "GID_tls_everywhere"))
    ok(rmq(env, "send", "tls_everywhere", "one"))
    group = ("--group", "GID_tls_everywhere", "--from", "earliest")
    assert "one" in ok(rmq(env, "consume", "tls_everywhere", *group))
    progress = ok(rmq(env, "group", "progress", "GID_tls_everywhere", "--namesrv", namesrv))
    assert "tls_everywhere" in progress, progress


def test_no_ca_against_tls_says_tls(tls_broker: BrokerProcess, namesrv: str) -> None:
    line = error_line(rmq({}, "topic", "list", "--endpoints", tls_broker.endpoint))
    assert "if it serves TLS, connect with TLS" in line and "RMQ_CA_FILE" in line, line
    line = error_line(rmq({}, "topic", "create", "t_no_ca", "--namesrv", namesrv))
    assert "serves TLS, connect with TLS" in line and "RMQ_CA_FILE" in line, line


def test_a_ca_against_a_plain_broker_says_tls_mismatch(
    plain_broker: BrokerProcess, pki: Pki
) -> None:
    env = {"RMQ_CA_FILE": str(pki.ca)}
    line = error_line(rmq(env, "topic", "list", "--endpoints", plain_broker.endpoint))
    assert "TLS mismatch" in line and "does not serve TLS" in line, line


def test_an_untrusted_certificate_says_so(
    tls_broker: BrokerProcess, pki: Pki, tmp_path: Path
) -> None:
    other = make_pki(tmp_path / "other")
    env = {"RMQ_CA_FILE": str(other.ca)}
    line = error_line(rmq(env, "topic", "list", "--endpoints", tls_broker.endpoint))
    assert "TLS: the broker's certificate" in line, line
