"""Broker groups in process: a slave refuses client writes and POP with one clear error
before anything is created and runs no appending service; the config-table copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.groups import GroupConfig
from broker_core.broker.topics import TopicConfig
from broker_core.config import BrokerConfig, Role
from broker_core.errors import NotMasterError, ReplicationProtocolError
from broker_core.ha import metadata
from broker_core.message import Message
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.columns import ColumnBatch
from tests.ha.conftest import small_store, tables_of, wait_until


def test_a_slave_refuses_writes_and_pop_but_serves_pulls(tmp_path: Path) -> None:
    broker = Broker(
        BrokerConfig(broker_name="s", broker_id=2, ha_master="127.0.0.1:1"),
        small_store(tmp_path),
    )
    broker.start()
    try:
        refusals = [
            lambda: broker.sending.send([Message("t-new", b"x")]),
            lambda: broker.sending.send_columns(ColumnBatch.__new__(ColumnBatch)),
            lambda: broker.consuming.receive("GID", "t-new", max_count=1, invisible_ms=1000),
            lambda: broker.consuming.ack("GID", "t-new", "handle"),
        ]
        for refused in refusals:
            with pytest.raises(NotMasterError, match=r"broker s is a slave \(broker id 2\)"):
                refused()
        assert broker.topics.get("t-new") is None  # refused before auto-creation
        assert broker.store.commitlog.max_offset == 0
        assert broker.replication.status() == {
            "role": "slave",
            "broker_id": 2,
            "replication": "async",
            "master": "127.0.0.1:1",
            "connected": False,
            "last_error": broker.replication.status()["last_error"],
        }
        health = broker.service_health()  # not started on a slave
        assert health["schedule-delivery"] == health["timer-wheel"] == "stopped"
        assert broker.replication.role is Role.SLAVE
    finally:
        broker.stop()


def test_the_ha_threads_are_service_threads_health_sees(tmp_path: Path) -> None:
    """A master's accept loop and a slave's link and table copy are listed with every
    other service: "ok" while they run, "stopped" once the broker stopped."""
    master = Broker(
        BrokerConfig(broker_name="h", ha_listen="127.0.0.1:0"), small_store(tmp_path / "m")
    )
    master.start()
    slave = None
    try:
        slave = Broker(
            BrokerConfig(broker_name="h", broker_id=1, ha_master=master.replication.ha_endpoint),
            small_store(tmp_path / "s"),
        )
        slave.start()
        assert master.service_health()["ha-accept"] == "ok"
        assert {k: slave.service_health()[k] for k in ("ha-slave", "ha-metadata")} == {
            "ha-slave": "ok",
            "ha-metadata": "ok",
        }
        master.sending.send([Message("t-ha", b"copied")])
        end = master.store.commitlog.max_offset
        wait_until(lambda: slave.store.commitlog.max_offset == end, what="the copy")
        threads = [*master.replication.threads(), *slave.replication.threads()]
    finally:
        if slave is not None:
            slave.stop()
        master.stop()
    assert {t.name: t.state() for t in threads} == {
        "ha-accept": "stopped",
        "ha-slave": "stopped",
        "ha-metadata": "stopped",
    }


def test_metadata_snapshot_carries_every_table_a_new_master_needs(
    master_and_slave: tuple[Broker, Broker],
) -> None:
    master, slave = master_and_slave
    master.update_topic(TopicConfig("t-meta", read_queue_nums=3, write_queue_nums=3))
    master.groups.create_or_update(GroupConfig("GID-meta", consume_from_where="first_offset"))
    master.consumer_groups.commit_offset("GID-meta", "t-meta", 2, 41)
    master.consumer_groups.commit_offset("GID-meta", "t-meta", 1, 5)
    slave.offsets.commit("GID-meta", "t-meta", 1, 9)  # the master's value wins
    slave.offsets.commit("GID-slave", "t-meta", 0, 3)  # a queue only the slave knows
    delay = master.store.config.config_dir / metadata.DELAY
    write_json_atomic(delay, {"offsets": {"1": 12, "3": 4}})  # delivery progress
    tables_of(slave).apply(tables_of(master).snapshot())
    assert slave.topics.get("t-meta") == master.topics.get("t-meta")
    assert slave.groups.get("GID-meta") == master.groups.get("GID-meta")
    assert slave.offsets.query("GID-meta", "t-meta", 2) == 41
    assert slave.offsets.query("GID-meta", "t-meta", 1) == 5
    assert slave.offsets.query("GID-slave", "t-meta", 0) == 3
    slave_delay = slave.store.config.config_dir / metadata.DELAY
    assert read_json_atomic(slave_delay).data == {"offsets": {"1": 12, "3": 4}}
    with pytest.raises(ReplicationProtocolError, match="does not parse"):
        tables_of(slave).apply(b"{torn")
