"""The user/ACL table travels with the config tables: a slave enforces its master's users
and rules, refuses changes of its own, and a slave restarted as master keeps them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from broker_core.auth.acl import Rule, User
from broker_core.auth.store import AUTH_FILE, AuthStore
from broker_core.broker.broker import Broker
from broker_core.client import RocketMQClient
from broker_core.errors import PermissionDeniedError, UnauthorizedError
from tests.ha.conftest import FAST_HA, tables_of, wait_until
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess

ORDERS, PAYMENTS = "orders", "payments"


def test_the_snapshot_carries_the_user_table_and_the_slave_reloads_it(
    master_and_slave: tuple[Broker, Broker],
) -> None:
    master, slave = master_and_slave
    on_master = AuthStore(master.store.config.config_dir / AUTH_FILE)
    on_master.create_user("carol", "carol-secret")
    on_master.create_acl("carol", Rule.build("Topic:orders", ["Pub"], "Allow", []))
    on_slave = AuthStore(slave.store.config.config_dir / AUTH_FILE)
    on_slave.bootstrap([User("root", "root-secret", superuser=True)])  # its config file
    copied = tables_of(slave)
    copied.reloaders[AUTH_FILE] = on_slave.reload
    copied.apply(tables_of(master).snapshot())
    assert on_slave.secret_of("carol") == "carol-secret"
    assert [r.resource for r in on_slave.rules_of("carol")] == ["Topic:orders"]
    assert on_slave.user("root") == User("root", "root-secret", superuser=True)
    mode = stat.S_IMODE(on_slave.path.stat().st_mode)
    assert mode == 0o600, oct(mode)  # it holds secret keys
    on_master.delete_user("carol")
    copied.apply(tables_of(master).snapshot())
    assert on_slave.user("carol") is None and on_slave.rules_of("carol") == []


def _start(workdir: Path, **broker: object) -> BrokerProcess:
    cfg = {"broker_name": "g", **FAST_HA, **broker}
    return start_with(workdir, config={"broker": cfg}, extra_toml=AUTH_TOML)


def _as(proc: BrokerProcess, user: str, secret: str) -> RocketMQClient:
    return RocketMQClient(proc.endpoint, access_key=user, secret_key=secret, max_attempts=1)


def _carol_pulls(proc: BrokerProcess) -> bool:
    with _as(proc, "carol", "carol-secret") as carol:
        return bool(carol.pull("GID_c", ORDERS, 0, 0, 10).messages)


def _dave_is_unknown(proc: BrokerProcess) -> bool:
    with _as(proc, "dave", "dave-secret") as dave:
        try:
            dave.list_topics()
        except UnauthorizedError:
            return True
    return False


def test_a_slave_enforces_its_masters_users_and_keeps_them_as_master(tmp_path: Path) -> None:
    master = _start(tmp_path / "master", broker_id=0, ha_listen="127.0.0.1:0")
    slave: BrokerProcess | None = None
    try:
        slave = _start(tmp_path / "slave", broker_id=1, ha_master=master.ha_endpoint)
        with _as(master, ADMIN_KEY, ADMIN_SECRET) as admin:
            admin.create_topic(ORDERS, queues=1)
            admin.create_topic(PAYMENTS, queues=1)
            admin.send(ORDERS, b"first")
            admin.create_user("carol", "carol-secret")
            admin.create_acl("carol", "Topic:*", ["Pub", "Sub"])
            admin.create_acl("carol", f"Topic:{PAYMENTS}", ["Pub"], decision="Deny")
            admin.create_acl("carol", "Group:GID_c", ["Sub"])
            admin.create_user("dave", "dave-secret")
            wait_until(lambda: _carol_pulls(slave), 20, "carol's user and rules on the slave")
            with (
                _as(slave, "carol", "carol-secret") as carol,
                pytest.raises(PermissionDeniedError, match="Group:GID_other"),
            ):
                carol.pull("GID_other", ORDERS, 0, 0, 10)
            admin.delete_user("dave")
            wait_until(lambda: _dave_is_unknown(slave), 20, "dave's deletion on the slave")
        with (
            _as(slave, ADMIN_KEY, ADMIN_SECRET) as on_slave,
            pytest.raises(PermissionDeniedError, match=r"is a slave.*send to its master"),
        ):
            on_slave.create_user("eve", "eve-secret")
        master.kill()
        assert slave.stop() == 0
        slave = _start(tmp_path / "slave", broker_id=0)  # the slave's store, now master
        _check_enforced(slave)
    finally:
        if master.process.poll() is None:
            master.stop()
        if slave is not None:
            slave.stop()


def _check_enforced(new_master: BrokerProcess) -> None:
    """Carol's rules hold on ``new_master``: Allow, Deny wins, keys checked, no admin."""
    with _as(new_master, "carol", "carol-secret") as carol:
        carol.send(ORDERS, b"after the failover")
        assert len(carol.pull("GID_c", ORDERS, 0, 0, 10).messages) == 2
        with pytest.raises(PermissionDeniedError, match=f"may not Pub on Topic:{PAYMENTS}"):
            carol.send(PAYMENTS, b"denied")
        with pytest.raises(PermissionDeniedError, match="super users only"):
            carol.list_users()
    with _as(new_master, "carol", "wrong-secret") as forged, pytest.raises(UnauthorizedError):
        forged.list_topics()
    assert _dave_is_unknown(new_master)
    with (
        RocketMQClient(new_master.endpoint, max_attempts=1) as unsigned,
        pytest.raises(UnauthorizedError, match="not signed"),
    ):
        unsigned.list_topics()
