"""Slow chaos for broker groups (``-m slow``): repeated master kills under sync load, a
slave frozen again and again under load, a slave killed and restarted under load."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import ReplicationTimeoutError, RocketMQError
from tests.ha.conftest import Group, start_master, start_slave, wait_replicated, wait_until
from tests.ha.test_failures import check_no_acked_loss, produce_until_killed, wait_topic_on_slave

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def in_sync_count(endpoint: str) -> int:
    with RocketMQClient(endpoint, max_attempts=1) as client:
        return len(client.health()["replication"]["in_sync"])


def test_master_killed_ten_times_under_sync_load_loses_nothing(tmp_path: Path) -> None:
    cfg = {
        "replication": "sync",
        "sync_replication_timeout_ms": 2_000,
        "ha_catch_up_window_ms": 5_000,
        "min_in_sync_replicas": 2,
        "ha_listen": f"127.0.0.1:{free_port()}",
    }
    master = start_master(tmp_path / "master", **cfg)
    group = Group(master, start_slave(tmp_path / "slave", master.ha_endpoint), tmp_path)
    acked: list[bytes] = []
    try:
        with RocketMQClient(master.endpoint, max_attempts=1) as client:
            client.create_topic("ha-kill", queues=4)
        wait_topic_on_slave(group, "ha-kill")
        for kill in range(10):
            wait_until(lambda: in_sync_count(group.master.endpoint) == 1, 30)
            acked += produce_until_killed(
                group.master, "ha-kill", kill_after_acks=60, prefix=f"kill{kill}"
            )
            check_no_acked_loss(group, "ha-kill", acked)
            group.master = start_master(tmp_path / "master", **cfg)  # recovers its store
        wait_replicated(group)
    finally:
        for proc in (group.slave, group.master):
            proc.stop()


class Producer(threading.Thread):
    """Sends 8-message batches until stopped; records what was acked and what timed out."""

    def __init__(self, endpoint: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.topic = endpoint, topic
        self.acked: list[bytes] = []
        self.timeouts = 0
        self.other_errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with RocketMQClient(self.endpoint, max_attempts=1, timeout_s=10) as client:
            n = 0
            while not self.stop.is_set():
                batch = [b"load-%08d" % (n + i) for i in range(8)]
                n += 8
                try:
                    client.send_batch(self.topic, batch)
                    self.acked.extend(batch)
                except ReplicationTimeoutError:
                    self.timeouts += 1
                except RocketMQError as exc:  # anything else is a finding
                    self.other_errors.append(repr(exc))


def start_group(tmp_path: Path, **cfg: object) -> Group:
    master = start_master(tmp_path / "master", **cfg)
    group = Group(master, start_slave(tmp_path / "slave", master.ha_endpoint), tmp_path)
    with RocketMQClient(master.endpoint, max_attempts=1) as client:
        client.create_topic("ha-load", queues=4)
    wait_topic_on_slave(group, "ha-load")
    wait_until(lambda: in_sync_count(master.endpoint) == 1)
    return group


def test_a_slave_frozen_again_and_again_under_load(tmp_path: Path) -> None:
    group = start_group(
        tmp_path, replication="sync", sync_replication_timeout_ms=500, ha_catch_up_window_ms=1_500
    )
    producer = Producer(group.master.endpoint, "ha-load")
    producer.start()
    try:
        for _ in range(4):
            group.slave.process.send_signal(signal.SIGSTOP)
            before = len(producer.acked)
            wait_until(
                lambda b=before: len(producer.acked) > b + 80,
                20,  # type: ignore[misc]
                "sends to proceed without the frozen slave",
            )
            group.slave.process.send_signal(signal.SIGCONT)
            wait_until(lambda: in_sync_count(group.master.endpoint) == 1, 30, "the rejoin")
        assert producer.timeouts >= 4  # each freeze held sends until the slave left
    finally:
        group.slave.process.send_signal(signal.SIGCONT)
        producer.stop.set()
        producer.join(30)
    assert producer.other_errors == []
    wait_replicated(group, 60)
    check_no_acked_loss(group, "ha-load", producer.acked)
    for proc in (group.slave, group.master):
        assert proc.stop() == 0


def test_a_slave_killed_and_restarted_under_load(tmp_path: Path) -> None:
    group = start_group(
        tmp_path, replication="sync", sync_replication_timeout_ms=2_000, ha_catch_up_window_ms=3_000
    )
    producer = Producer(group.master.endpoint, "ha-load")
    producer.start()
    try:
        for _ in range(5):
            before = len(producer.acked)
            wait_until(
                lambda b=before: len(producer.acked) > b + 200,
                30,  # type: ignore[misc]
                "load with the slave in the set",
            )
            group.slave.kill()
            group.start_slave()
            wait_until(lambda: in_sync_count(group.master.endpoint) == 1, 30, "the rejoin")
    finally:
        producer.stop.set()
        producer.join(30)
    try:
        assert producer.other_errors == []
        wait_replicated(group, 60)
        check_no_acked_loss(group, "ha-load", producer.acked)
    finally:
        for proc in (group.slave, group.master):
            proc.stop()
