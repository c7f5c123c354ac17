"""``rmq`` under ACL: a user with what RocketMQ's ACL 2.0 asks for a verb can run it.

Consuming needs Sub on the topic and on the group, and nothing else (no Get): ``rmq
consume`` finds its queues and their bounds through QueryRoute/QueryOffset, not the admin
TopicStatus. The README's ``rmq user create`` / ``rmq acl create`` lines run as written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from broker_core.cli import cli
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(tmp_path_factory.mktemp("acl"), extra_toml=AUTH_TOML)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def rmq(broker: BrokerProcess, key: str, secret: str, *args: str) -> Result:
    env: dict[str, Any] = {
        "RMQ_ACCESS_KEY": key,
        "RMQ_SECRET_KEY": secret,
        "RMQ_ENDPOINTS": broker.endpoint,
        "COLUMNS": "250",
    }
    return CliRunner(env=env).invoke(cli, list(args), catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def test_consume_needs_sub_on_topic_and_group_only(auth_broker: BrokerProcess) -> None:
    admin = (auth_broker, ADMIN_KEY, ADMIN_SECRET)
    ok(rmq(*admin, "topic", "create", "acl_orders", "--queues", "2"))
    ok(rmq(*admin, "group", "create", "acl_billing"))
    for i in range(3):
        ok(rmq(*admin, "send", "acl_orders", f"order {i}"))
    ok(rmq(*admin, "user", "create", "alice", "--secret-key", "alice-secret"))
    for resource in ("Topic:acl_orders", "Group:acl_billing"):
        ok(
            rmq(
                *admin,
                "acl",
                "create",
                "--user",
                "alice",
                "--resource",
                resource,
                "--actions",
                "Sub",
            )
        )
    alice = (auth_broker, "alice", "alice-secret")
    group = ("--group", "acl_billing")
    got = ok(rmq(*alice, "consume", "acl_orders", *group, "--from", "earliest", "--max", "2"))
    more = ok(rmq(*alice, "consume", "acl_orders", *group))  # from the committed offsets
    bodies = sorted(line.rsplit(" ", 2)[-2:][1] for line in (got + more).splitlines())
    assert bodies == ["0", "1", "2"], got + more
    denied = rmq(*alice, "topic", "status", "acl_orders")  # Get was not given
    assert denied.exit_code == 1 and "FORBIDDEN" in denied.output, denied.output


def test_group_delete_needs_delete_and_broker_config_a_super_user(auth_broker) -> None:
    admin = (auth_broker, ADMIN_KEY, ADMIN_SECRET)
    ok(rmq(*admin, "group", "create", "acl_doomed"))
    ok(rmq(*admin, "user", "create", "bob", "--secret-key", "bob-secret"))
    grant = ("acl", "create", "--user", "bob", "--resource", "Group:acl_doomed")
    ok(rmq(*admin, *grant, "--actions", "Sub"))
    bob = (auth_broker, "bob", "bob-secret")
    for args in (
        ("group", "delete", "acl_doomed"),
        ("broker", "config", "get"),
        ("broker", "config", "set", "auto_create_groups", "false"),
    ):
        denied = rmq(*bob, *args)
        assert denied.exit_code == 1 and "FORBIDDEN" in denied.output, denied.output
    ok(rmq(*admin, "acl", "delete", "--user", "bob", "--resource", "Group:acl_doomed"))
    ok(rmq(*admin, *grant, "--actions", "Delete"))
    assert "group acl_doomed deleted" in ok(rmq(*bob, "group", "delete", "acl_doomed"))
    assert "max_long_polling_ms" in ok(rmq(*admin, "broker", "config", "get"))
