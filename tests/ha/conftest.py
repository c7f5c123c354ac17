"""Broker groups on loopback: a master and a slave as real broker processes."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.broker import Broker
from broker_core.client import RocketMQClient
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.errors import RocketMQError
from broker_core.ha import metadata
from tests.server.conftest import BrokerProcess, start_broker

FAST_HA = {"ha_heartbeat_interval_ms": 200, "ha_metadata_interval_ms": 300}


@dataclass
class Group:
    master: BrokerProcess
    slave: BrokerProcess
    workdir: Path

    def start_slave(self) -> BrokerProcess:
        """(Re)start the slave on its store, replicating from the master."""
        self.slave = start_slave(self.workdir / "slave", self.master.ha_endpoint)
        return self.slave


def start_master(workdir: Path, **broker: Any) -> BrokerProcess:
    cfg = {"broker_name": "g", "broker_id": 0, "ha_listen": "127.0.0.1:0", **FAST_HA, **broker}
    proc = start_broker(workdir, config={"broker": cfg})
    assert proc.ha_endpoint, "".join(proc.output)
    return proc


def start_slave(workdir: Path, master_ha: str, **broker: Any) -> BrokerProcess:
    """A slave of the master whose HA port is ``master_ha``."""
    cfg = {"broker_name": "g", "broker_id": 1, "ha_master": master_ha, **FAST_HA, **broker}
    return start_broker(workdir, config={"broker": cfg})


@pytest.fixture
def group_factory(tmp_path: Path) -> Iterator[Callable[..., Group]]:
    """Start master + slave with master settings given; everything is stopped at the end."""
    made: list[Group] = []

    def make(**master_cfg: Any) -> Group:
        master = start_master(tmp_path / "master", **master_cfg)
        group = Group(master, start_slave(tmp_path / "slave", master.ha_endpoint), tmp_path)
        made.append(group)
        return group

    yield make
    for group in made:
        for proc in (group.slave, group.master):
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGCONT)
                proc.stop()


def small_store(store_dir: Path) -> StoreConfig:
    """A store config for in-process brokers: 1 MiB segments, bodies up to 1 KiB."""
    return StoreConfig(store_dir=str(store_dir), segment_size_bytes=1 << 20, max_body_bytes=1024)


@pytest.fixture
def master_and_slave(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    """Group ``m`` in process, started: a master (store ``tmp_path/m``) and a slave
    (``tmp_path/s``) whose master address leads nowhere, so nothing replicates by itself:
    a test moves the config tables with ``tables_of(...).apply``."""
    master = Broker(BrokerConfig(broker_name="m"), small_store(tmp_path / "m"))
    slave_config = BrokerConfig(broker_name="m", broker_id=1, ha_master="127.0.0.1:1")
    slave = Broker(slave_config, small_store(tmp_path / "s"))
    master.start()
    slave.start()
    try:
        yield master, slave
    finally:
        slave.stop()
        master.stop()


def wait_until(check: Callable[[], bool], timeout_s: float = 20, what: str = "") -> None:
    """Poll ``check`` until true. A broker error counts as "not yet" (a slave answers
    TopicNotFound until the topic's config is copied); the last one is reported."""
    deadline = time.monotonic() + timeout_s
    last_error: RocketMQError | None = None
    while True:
        try:
            if check():
                return
        except RocketMQError as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what or check}"
                f" (last error: {last_error!r})"
            )
        time.sleep(0.05)


def commitlog_bytes(store_dir: Path) -> bytes:
    """Every commitlog segment of a store, in offset order (zeros past the written end)."""
    return b"".join(p.read_bytes() for p in sorted((store_dir / "commitlog").iterdir()))


def written_end(store_dir: Path) -> int:
    """Offset of the first zero total-size field scanning units from the first segment."""
    data = commitlog_bytes(store_dir)
    pos = 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if size == 0:
            return pos
        pos += size
    return pos


def wait_replicated(group: Group, timeout_s: float = 20) -> bytes:
    """Wait until the slave's commitlog equals the master's; returns the master's bytes."""

    def same() -> bool:
        return commitlog_bytes(group.slave.store_dir) == commitlog_bytes(group.master.store_dir)

    wait_until(same, timeout_s, "the slave's commitlog to equal the master's")
    return commitlog_bytes(group.master.store_dir)


def pull_all(client: RocketMQClient, topic: str, queues: int) -> list[bytes]:
    """Every body in the topic's queues (queue by queue, in offset order)."""
    bodies: list[bytes] = []
    for qid in range(queues):
        offset = client.query_offset(topic, qid, "BEGINNING")  # retention may have cut it
        while True:
            batch = client.pull("ha-reader", topic, qid, offset, 256)
            bodies.extend(m.body for m in batch.messages)
            if batch.next_offset >= batch.max_offset:
                break
            offset = batch.next_offset
    return bodies


def tables_of(broker: Broker) -> metadata.ConfigTables:
    """The tables replication copies, as the broker hands them to it."""
    return metadata.ConfigTables(
        broker.store.config.config_dir, broker.topics, broker.groups, broker.offsets
    )
