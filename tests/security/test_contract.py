"""The issue's command contract, as the acceptance tests call it: ``rmq broker start
--config broker.toml`` with [auth], ``rmq user create`` / ``rmq acl create`` with
RMQ_ACCESS_KEY/RMQ_SECRET_KEY, ``--metrics-listen``; users and rules survive a restart."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import InvalidArgumentError
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML

RMQ = Path(sys.executable).with_name("rmq")
ADMIN_ENV = {**os.environ, "RMQ_ACCESS_KEY": ADMIN_KEY, "RMQ_SECRET_KEY": ADMIN_SECRET}


@contextmanager
def rmq_broker(workdir: Path) -> Iterator[tuple[str, str]]:
    """``rmq broker start`` with [auth] and metrics; yields (endpoint, metrics URL)."""
    config = workdir / "broker.toml"
    config.write_text(AUTH_TOML)
    proc = subprocess.Popen(
        [
            str(RMQ),
            "broker",
            "start",
            "--listen",
            "127.0.0.1:0",
            "--store-dir",
            str(workdir / "store"),
            "--config",
            str(config),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        endpoint = metrics = ""
        for line in proc.stdout:
            if line.startswith("METRICS "):
                metrics = line.split()[1]
            if line.startswith("READY "):
                endpoint = line.split()[1]
                break
        assert endpoint and metrics, "rmq broker start exited before READY"
        yield endpoint, metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def rmq(*args: str, env: dict[str, str] = ADMIN_ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RMQ), *args], capture_output=True, text=True, env=env, timeout=60)


def test_command_contract_and_durable_rules(tmp_path) -> None:
    with rmq_broker(tmp_path) as (endpoint, metrics):
        made = rmq("user", "create", "dave", "--secret-key", "dave-secret", "--endpoints", endpoint)
        assert made.returncode == 0, made.stderr
        rule = rmq(
            "acl",
            "create",
            "--user",
            "dave",
            "--resource",
            "Topic:orders",
            "--actions",
            "Pub",
            "--decision",
            "Allow",
            "--endpoints",
            endpoint,
        )
        assert rule.returncode == 0, rule.stderr
        assert rmq("topic", "create", "orders", "--endpoints", endpoint).returncode == 0
        unsigned = rmq("topic", "list", "--endpoints", endpoint, env=dict(os.environ))
        assert unsigned.returncode == 1 and "not signed" in unsigned.stderr
        with urllib.request.urlopen(metrics, timeout=10) as reply:
            assert b"rocketmq_storage_size" in reply.read()
    auth_file = tmp_path / "store" / "config" / "auth.json"
    assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    assert "dave-secret" in auth_file.read_text()  # HMAC needs the secret itself
    with rmq_broker(tmp_path) as (endpoint, _):
        listed = rmq("acl", "list", "--user", "dave", "--endpoints", endpoint)
        assert "Topic:orders" in listed.stdout and "Allow" in listed.stdout
        with RocketMQClient(endpoint, access_key="dave", secret_key="dave-secret") as dave:
            assert dave.send_batch("orders", [(b"after restart",)])[0].offset == 0
        admin = RocketMQClient(endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)
        with admin, pytest.raises(InvalidArgumentError, match="config file"):
            admin.delete_user(ADMIN_KEY)
