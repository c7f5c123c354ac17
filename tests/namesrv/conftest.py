"""NameServer processes and registrations shared by the NameServer tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker_core.namesrv.client import (
    BrokerRegistration,
    DataVersion,
    NameServerClient,
    TopicQueueConfig,
)
from tests.cluster_procs import NamesrvProcess, start_namesrv, stop_namesrv


def registration(
    broker_name: str = "broker-a",
    *,
    broker_id: int = 0,
    addr: str = "127.0.0.1:10911",
    topics: dict[str, TopicQueueConfig] | None = None,
    state_version: int = 0,
    counter: int = 1,
    cluster: str = "DefaultCluster",
    heartbeat_timeout_ms: int = 120_000,
) -> BrokerRegistration:
    """A registration with sensible defaults; ``grpc_addr`` is derived from ``addr``."""
    host, _, port = addr.rpartition(":")
    return BrokerRegistration(
        cluster=cluster,
        broker_name=broker_name,
        broker_id=broker_id,
        broker_addr=addr,
        grpc_addr=f"{host}:{int(port) + 1000}",
        ha_addr=f"{host}:{int(port) + 1}",
        topics=topics if topics is not None else {"orders": TopicQueueConfig(4, 4)},
        data_version=DataVersion(state_version, time.time_ns() // 1_000_000, counter),
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )


@pytest.fixture(scope="module")
def namesrv() -> Iterator[tuple[NamesrvProcess, str]]:
    """One NameServer process per test module (default timers)."""
    proc, addr = start_namesrv()
    yield proc, addr
    assert stop_namesrv(proc) == 0, "".join(proc.output[-40:])


@pytest.fixture()
def fresh_namesrv() -> Iterator[tuple[NamesrvProcess, str]]:
    """A NameServer of its own for one test, with fast timers (scan 100 ms, expiry 1 s)."""
    proc, addr = start_namesrv(scan_interval_ms=100, broker_expiry_ms=1_000)
    yield proc, addr
    assert stop_namesrv(proc) == 0, "".join(proc.output[-40:])


@pytest.fixture()
def ns_client(namesrv: tuple[NamesrvProcess, str]) -> Iterator[NameServerClient]:
    client = NameServerClient(namesrv[1])
    yield client
    client.close()
