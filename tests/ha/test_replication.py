"""Master and slave as real broker processes: same bytes at the same offsets, reads from the
slave, the slave refusing writes, config tables copied, a restarted slave resuming."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import PermissionDeniedError
from tests.ha.conftest import (
    FAST_HA,
    Group,
    commitlog_bytes,
    pull_all,
    wait_replicated,
    wait_until,
    written_end,
)
from tests.server.conftest import start_broker


def test_the_slave_holds_the_masters_bytes_and_serves_reads(
    group_factory: Callable[..., Group],
) -> None:
    group = group_factory(replication="async")
    with (
        RocketMQClient(group.master.endpoint, max_attempts=1) as master,
        RocketMQClient(group.slave.endpoint, max_attempts=1) as slave,
    ):
        master.create_topic("ha-orders", queues=3)
        sent = [f"order-{i}".encode() * (1 + i % 50) for i in range(600)]
        for start in range(0, 400, 100):
            master.send_batch("ha-orders", sent[start : start + 100])  # the column lane
        for body in sent[400:]:
            master.send("ha-orders", body, keys=["k" + body[:9].decode()])  # the general lane
        data = wait_replicated(group)
        assert written_end(group.slave.store_dir) == written_end(group.master.store_dir) > 0
        assert len(data) > 0
        wait_until(
            lambda: (
                [q["max_offset"] for q in slave.topic_status("ha-orders")]
                == [q["max_offset"] for q in master.topic_status("ha-orders")]
            ),
            what="the slave's queues (copied topic config, dispatched units)",
        )
        assert sorted(pull_all(slave, "ha-orders", 3)) == sorted(sent)
        assert pull_all(slave, "ha-orders", 3) == pull_all(master, "ha-orders", 3)
        with pytest.raises(PermissionDeniedError, match="broker g is a slave"):
            slave.send("ha-orders", b"refused")
        assert pull_all(slave, "ha-orders", 3) == pull_all(master, "ha-orders", 3)


def test_config_tables_reach_the_slave(group_factory: Callable[..., Group]) -> None:
    group = group_factory()
    with (
        RocketMQClient(group.master.endpoint, max_attempts=1) as master,
        RocketMQClient(group.slave.endpoint, max_attempts=1) as slave,
    ):
        master.create_topic("ha-config", queues=5)
        master.create_group("GID-ha", max_retries=7)
        master.send("ha-config", b"x")
        master.update_offset("GID-ha", "ha-config", 2, 1)

        def copied() -> bool:
            topics = {t["name"]: t for t in slave.list_topics()}
            groups = {g["name"]: g for g in slave.list_groups()}
            return (
                "ha-config" in topics
                and "GID-ha" in groups
                and slave.get_offset("GID-ha", "ha-config", 2) == 1
            )

        wait_until(copied, what="the topic, group and offset on the slave")
        assert len(slave.topic_status("ha-config")) == 5
        on_master = {g["name"]: g for g in master.list_groups()}["GID-ha"]
        assert {g["name"]: g for g in slave.list_groups()}["GID-ha"] == on_master
        assert "7" in str(on_master)  # max_retries, as the master's admin shows it


def test_a_restarted_slave_resumes_from_its_offset(group_factory: Callable[..., Group]) -> None:
    group = group_factory()
    with RocketMQClient(group.master.endpoint, max_attempts=1) as master:
        master.create_topic("ha-resume", queues=2)
        master.send_batch("ha-resume", [b"before-%d" % i for i in range(200)])
        wait_replicated(group)
        assert group.slave.stop() == 0
        resumed_at = written_end(group.slave.store_dir)
        master.send_batch("ha-resume", [b"after-%d" % i for i in range(200)])
        group.start_slave()
        wait_replicated(group)
        assert f"streaming from offset {resumed_at}" in "".join(group.master.output)
        with RocketMQClient(group.slave.endpoint, max_attempts=1) as slave:
            wait_until(
                lambda: len(pull_all(slave, "ha-resume", 2)) == 400,
                what="all 400 messages readable on the restarted slave",
            )


def test_a_slave_restarted_as_master_has_everything_a_master_needs(
    group_factory: Callable[..., Group],
) -> None:
    group = group_factory()
    with RocketMQClient(group.master.endpoint, max_attempts=1) as master:
        master.create_topic("ha-promote", queues=2)
        master.create_group("GID-promote", max_retries=3)
        master.send_batch("ha-promote", [b"old-%d" % i for i in range(100)])
        master.update_offset("GID-promote", "ha-promote", 1, 7)
        wait_replicated(group)
        with RocketMQClient(group.slave.endpoint, max_attempts=1) as slave:
            wait_until(
                lambda: "ha-promote" in {t["name"] for t in slave.list_topics()},
                what="the topic on the slave",
            )
            wait_until(
                lambda: slave.get_offset("GID-promote", "ha-promote", 1) == 7,
                what="the committed offset on the slave",
            )
    group.master.kill()
    assert group.slave.stop() == 0
    promoted = start_broker(
        group.workdir / "slave", config={"broker": {"broker_name": "g", "broker_id": 0}}
    )
    try:
        with RocketMQClient(promoted.endpoint, max_attempts=1) as client:
            receipts = client.send_batch("ha-promote", [b"new-%d" % i for i in range(10)])
            assert {r.offset for r in receipts} == set(range(50, 55))  # continues
            assert sorted(pull_all(client, "ha-promote", 2)) == sorted(
                [b"old-%d" % i for i in range(100)] + [b"new-%d" % i for i in range(10)]
            )
            assert client.get_offset("GID-promote", "ha-promote", 1) == 7
            assert "GID-promote" in {g["name"] for g in client.list_groups()}
    finally:
        assert promoted.stop() == 0


def test_a_new_slave_starts_at_the_masters_first_retained_segment(tmp_path: Path) -> None:
    # Any disk is "fuller" than 1e-6: retention deletes every segment but the active one.
    small = {
        "segment_size_bytes": 64 << 10,
        "max_body_bytes": 16 << 10,
        "max_properties_bytes": 4 << 10,
        "disk_max_used_ratio": 1e-6,
        "cleanup_interval_ms": 200,
    }
    master = start_broker(
        tmp_path / "master",
        config={
            "broker": {"broker_name": "g", "ha_listen": "127.0.0.1:0", **FAST_HA},
            "store": small,
        },
    )
    slave = None
    try:
        with RocketMQClient(master.endpoint, max_attempts=1) as client:
            client.create_topic("ha-retained", queues=1)
            for i in range(6):
                client.send_batch(
                    "ha-retained", [b"r%d-%d" % (i, j) + bytes(900) for j in range(40)]
                )
            segments = master.store_dir / "commitlog"
            wait_until(
                lambda: len(list(segments.glob("0*"))) == 1,
                30,
                "retention to delete every segment but the active one",
            )
            first = int(next(segments.glob("0*")).name)
            assert first > 0 and client.health()["commitlog_min_offset"] == first
            slave = start_broker(
                tmp_path / "slave",
                config={
                    "broker": {
                        "broker_name": "g",
                        "broker_id": 1,
                        "ha_master": master.ha_endpoint,
                        **FAST_HA,
                    },
                    "store": {**small, "disk_max_used_ratio": 0.99},
                },
            )
            wait_until(
                lambda: (
                    [p.name for p in sorted((slave.store_dir / "commitlog").glob("0*"))]
                    == [f"{first:020d}"]
                )
            )
            wait_until(
                lambda: (
                    commitlog_bytes(slave.store_dir)
                    == (master.store_dir / "commitlog" / f"{first:020d}").read_bytes()
                )
            )
            low = client.topic_status("ha-retained")[0]["min_offset"]
            with RocketMQClient(slave.endpoint, max_attempts=1) as reader:
                wait_until(
                    lambda: (
                        reader.topic_status("ha-retained")[0]["min_offset"] == low
                        and pull_all(reader, "ha-retained", 1) == pull_all(client, "ha-retained", 1)
                    ),
                    30,
                )
    finally:
        for proc in (slave, master):
            if proc is not None:
                proc.stop()
