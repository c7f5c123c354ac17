"""--log-format json and the audit log: one line per admin change, with outcome."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError, TopicNotFoundError
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess


@pytest.fixture(scope="module")
def json_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(
        tmp_path_factory.mktemp("logs"), extra_args=["--log-format", "json", "--log-level", "debug"]
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def audit_lines(proc: BrokerProcess, count: int, timeout_s: float = 10) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [json.loads(line) for line in list(proc.output) if line.startswith("{")]
        found = [line for line in lines if line.get("audit")]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_json_lines_and_an_audit_line_per_admin_change(json_broker: BrokerProcess) -> None:
    with RocketMQClient(json_broker.endpoint) as client:
        client.create_topic("audited", queues=2)
        client.create_group("GID_audited", max_retries=3)
        client.reset_offset("GID_audited", "audited", "earliest")
        client.delete_topic("audited")
        with pytest.raises(TopicNotFoundError):
            client.delete_topic("audited")
        client.list_topics()  # a read: no audit line
    found = audit_lines(json_broker, 5)
    assert [a["action"] for a in found] == [
        "CreateTopic",
        "CreateGroup",
        "ResetOffset",
        "DeleteTopic",
        "DeleteTopic",
    ]
    assert found[0]["args"] == {"name": "audited", "queues": 2}
    assert found[0]["outcome"] == "ok" and found[0]["user"] == "anonymous"
    assert found[0]["peer"].startswith(("ipv4:127.0.0.1:", "ipv6:"))
    assert found[4]["outcome"].startswith("refused 40402")
    for line in found:
        assert {"ts", "level", "logger", "message"} <= set(line)
        assert line["logger"] == "rmq.audit" and line["ts"].endswith("Z")


def test_text_format_is_the_default(broker_process: BrokerProcess) -> None:
    with RocketMQClient(broker_process.endpoint) as client:
        client.create_topic("audited-text")
    deadline = time.monotonic() + 10
    while not any("audit CreateTopic by anonymous" in line for line in broker_process.output):
        assert time.monotonic() < deadline, "".join(broker_process.output[-20:])
        time.sleep(0.05)
    assert not any(line.startswith("{") for line in broker_process.output)


SECRETS = ("first-S3cret-of-dave", "second-S3cret-of-dave")


@pytest.fixture(scope="module")
def json_auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(
        tmp_path_factory.mktemp("logs-auth"),
        extra_toml=AUTH_TOML,
        extra_args=["--log-format", "json", "--log-level", "debug"],
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def test_audit_lines_mask_secrets_whatever_the_outcome(json_auth_broker: BrokerProcess) -> None:
    """A user's secret key reaches no log line: not the audit line of a change that
    succeeded, not of one refused, not any debug line."""
    with RocketMQClient(
        json_auth_broker.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET
    ) as admin:
        admin.create_user("dave", SECRETS[0])
        with pytest.raises(RocketMQError):  # exists: refused, still audited
            admin.create_user("dave", SECRETS[1])
        admin.create_user("dave", SECRETS[1], update=True)
    found = [a for a in audit_lines(json_auth_broker, 3) if a["action"] == "CreateUser"]
    assert [a["outcome"].split(" ")[0] for a in found] == ["ok", "refused", "ok"]
    for line in found:
        assert line["args"]["secret_key"] == "***" and line["args"]["user"] == "dave"
        assert line["user"] == ADMIN_KEY
    output = "".join(json_auth_broker.output)
    assert "dave" in output
    for secret in (*SECRETS, ADMIN_SECRET):
        assert secret not in output
