"""The RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4) with session credentials against a
broker with ``[auth]`` on: its signed sends pass where the user's rules allow them and
are refused (NO_PERMISSION) where they do not; without credentials nothing is stored."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster
from broker_core.server.launcher import to_toml
from tests.external.conftest import HERE, Cluster4x, start_cluster4x
from tests.external.test_cpp_client import wait_routed
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML
from tests.server.conftest import DEFAULT_CONFIG

CPP = HERE / "cpp"


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster4x]:
    directory = tmp_path_factory.mktemp("cpp-acl")
    config = directory / "auth.toml"
    config.write_text(to_toml(DEFAULT_CONFIG) + AUTH_TOML)
    cluster = start_cluster4x(directory, extra_broker_args=["--config", str(config)])
    with _admin(cluster) as admin:
        for topic in ("cpp-orders", "cpp-payments"):
            admin.create_topic(topic, queues=2)
        admin.create_user("carol", "carol-secret")
        admin.create_acl("carol", "Topic:cpp-orders", ["Pub"])
    for topic in ("cpp-orders", "cpp-payments"):
        wait_routed(cluster, topic, 2)
    yield cluster
    _stop(cluster.local)


def _admin(cluster: Cluster4x) -> RocketMQClient:
    return RocketMQClient(cluster.grpc, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)


def _stop(local: LocalCluster) -> None:
    local.stop()
    for name, proc in local.brokers.items():
        assert proc.process.returncode == 0, (name, "".join(proc.output[-40:]))


def _produce(python: Path, cluster: Cluster4x, topic: str, *credentials: str):  # type: ignore[no-untyped-def]
    keys = ["--access-key", credentials[0], "--secret-key", credentials[1]] if credentials else []
    cmd = [str(python), str(CPP / "produce.py"), cluster.namesrv, topic, "3", *keys]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    return done, lines


def _stored(cluster: Cluster4x, topic: str) -> int:
    with _admin(cluster) as admin:
        return sum(q["max_offset"] for q in admin.topic_status(topic))


def test_cpp_producer_with_credentials_sends_where_allowed(
    cpp_python: Path, auth_cluster: Cluster4x
) -> None:
    done, lines = _produce(cpp_python, auth_cluster, "cpp-orders", "carol", "carol-secret")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert [x["status"] for x in lines] == [0, 0, 0]
    assert _stored(auth_cluster, "cpp-orders") == 3


def test_cpp_producer_is_refused_without_the_right(
    cpp_python: Path, auth_cluster: Cluster4x
) -> None:
    """The C++ client reports a refused send only as a failed send (its text drops the
    broker's remark), so the reasons are read from the broker's log."""
    before = _stored(auth_cluster, "cpp-orders")
    denied, lines = _produce(cpp_python, auth_cluster, "cpp-payments", "carol", "carol-secret")
    assert denied.returncode != 0 and lines == []
    wrong, lines = _produce(cpp_python, auth_cluster, "cpp-orders", "carol", "not-her-secret")
    assert wrong.returncode != 0 and lines == []
    unsigned, lines = _produce(cpp_python, auth_cluster, "cpp-orders")
    assert unsigned.returncode != 0 and lines == []
    assert _stored(auth_cluster, "cpp-payments") == 0
    assert _stored(auth_cluster, "cpp-orders") == before
    log = "".join(auth_cluster.local.brokers["broker-a"].output)
    for reason in (
        "user 'carol' may not Pub on Topic:cpp-payments",
        "signature mismatch for access key 'carol'",
        "the request is not signed",
    ):
        assert reason in log, reason
