"""TLS on the broker's gRPC port: the official client (tls_enable=True, CA through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), our client, the CLI; client-certificate verification;
authentication over TLS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.client.errors import BrokerUnavailableError
from broker_core.errors import ConfigError
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.security.pki import Pki, make_pki, tls_toml
from tests.server.conftest import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki: Pki) -> Iterator[BrokerProcess]:
    """TLS and authentication on."""
    proc = start_with(tmp_path_factory.mktemp("tls"), extra_toml=AUTH_TOML + tls_toml(pki))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


OFFICIAL = textwrap.dedent("""
    import json, sys, time
    from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Producer,
                          SimpleConsumer)
    from rocketmq.v5.model import Message
    endpoint, key, secret = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials(key, secret), request_timeout=5)
    producer = Producer(config, ("tls-orders",), tls_enable=True)
    producer.startup()
    m = Message(); m.topic = "tls-orders"; m.body = b"over tls"
    sent = producer.send(m).message_id
    producer.shutdown()
    consumer = SimpleConsumer(config, "GID_tls", {"tls-orders": FilterExpression()},
                              await_duration=2, tls_enable=True)
    consumer.startup()
    got, deadline = [], time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = consumer.receive(16, 20)
    for msg in got:
        consumer.ack(msg)
    consumer.shutdown()
    print(json.dumps({"sent": sent, "received": [g.message_id for g in got]}))
""")


def test_official_client_with_tls_enable(tls_broker: BrokerProcess, pki: Pki) -> None:
    with RocketMQClient(
        tls_broker.endpoint, ca_file=str(pki.ca), access_key=ADMIN_KEY, secret_key=ADMIN_SECRET
    ) as admin:
        admin.create_topic("tls-orders", queues=1)
        admin.create_group("GID_tls", consume_from_where="first_offset")
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(pki.ca)}
    done = subprocess.run(
        [sys.executable, "-c", OFFICIAL, tls_broker.endpoint, ADMIN_KEY, ADMIN_SECRET],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["received"] == [result["sent"]]


def test_our_client_and_cli_over_tls(tls_broker: BrokerProcess, pki: Pki) -> None:
    with RocketMQClient(
        tls_broker.endpoint, ca_file=str(pki.ca), access_key=ADMIN_KEY, secret_key=ADMIN_SECRET
    ) as ours:
        ours.create_topic("tls-ours", queues=1)
        assert ours.send_batch("tls-ours", [(b"a",), (b"b",)])[1].offset == 1
    env = {"RMQ_CA_FILE": str(pki.ca), "RMQ_ACCESS_KEY": ADMIN_KEY, "RMQ_SECRET_KEY": ADMIN_SECRET}
    listed = CliRunner().invoke(cli, ["topic", "list", "--endpoints", tls_broker.endpoint], env=env)
    assert listed.exit_code == 0 and "tls-ours" in listed.output, listed.output
    with (
        RocketMQClient(tls_broker.endpoint, max_attempts=1, timeout_s=3) as plain,
        pytest.raises(BrokerUnavailableError),
    ):
        plain.list_topics()  # plaintext to a TLS port
    other = make_pki(pki.ca.parent / "other")
    with (
        RocketMQClient(
            tls_broker.endpoint, ca_file=str(other.ca), max_attempts=1, timeout_s=3
        ) as untrusting,
        pytest.raises(BrokerUnavailableError),
    ):
        untrusting.list_topics()  # a CA that did not sign the broker's certificate


def test_client_certificates_verified(tmp_path, pki: Pki) -> None:
    proc = start_with(tmp_path, extra_toml=tls_toml(pki, client_ca=True))
    try:
        with RocketMQClient(
            proc.endpoint,
            ca_file=str(pki.ca),
            cert_file=str(pki.client_cert),
            key_file=str(pki.client_key),
        ) as with_cert:
            with_cert.create_topic("mtls")
        with (
            RocketMQClient(
                proc.endpoint, ca_file=str(pki.ca), max_attempts=1, timeout_s=3
            ) as without,
            pytest.raises(BrokerUnavailableError),
        ):
            without.list_topics()
    finally:
        assert proc.stop() == 0, "".join(proc.output[-50:])


def test_bad_tls_config_is_a_clear_start_up_error(tmp_path, pki: Pki) -> None:
    from broker_core.auth.config import load_security
    from broker_core.auth.tls import server_credentials

    config = tmp_path / "b.toml"
    config.write_text('[tls]\ncert_file = "/no/such.pem"\nkey_file = "/no/such.key"\n')
    _auth, tls = load_security(config)
    assert tls is not None
    with pytest.raises(ConfigError, match="cannot read key_file"):
        server_credentials(tls)
    config.write_text('[tls]\ncert_file = "x.pem"\n')
    with pytest.raises(ConfigError, match="needs cert_file and key_file"):
        load_security(config)
    config.write_text("[auth]\nenabled = true\n")
    with pytest.raises(ConfigError, match="super user"):
        load_security(config)
