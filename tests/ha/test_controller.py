"""Controller mode on a real etcd: failover after SIGKILL, split brain after SIGSTOP.

Three brokers of group ``g`` with sync replication; a producer sends continuously through
``FailoverSender`` (each broker in turn until one acks). Whatever was acknowledged must be
readable from the new master afterwards, and a broker that returns must rejoin as a slave
whose commitlog is byte for byte the master's (so its cut at the new epoch worked).
"""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.cli_cluster import cluster_info
from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster
from broker_core.cluster.routes import master_grpc_addr
from broker_core.errors import RocketMQError
from broker_core.ha.controller import ControllerAgent
from broker_core.ha.etcd_state import EtcdGroup
from tests.cluster_procs import start_namesrv
from tests.ha.conftest import commitlog_bytes, pull_all, wait_until
from tests.ha.controller_procs import (
    ETCD,
    ControllerGroup,
    EtcdCluster,
    EtcdProcess,
    FailoverSender,
)
from tests.send_loop import SendLoop

pytestmark = pytest.mark.skipif(
    not Path(ETCD).exists(), reason="etcd is not installed (./dev installs etcd-server)"
)

SYNC = {"replication": "sync", "sync_replication_timeout_ms": 2_000, "ha_catch_up_window_ms": 3_000}
TOPIC = "Failover"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    proc = EtcdProcess.start(tmp_path / "etcd")
    yield proc
    proc.stop()


@pytest.fixture
def group(etcd: EtcdProcess, tmp_path: Path) -> Iterator[ControllerGroup]:
    grp = ControllerGroup(etcd, tmp_path, broker=SYNC)
    for member in ("a", "b", "c"):
        grp.start(member)
    wait_until(lambda: len(_state(grp).in_sync) == 3, 30, "all three brokers in sync")
    yield grp
    grp.stop_all()


def _state(grp: ControllerGroup):  # type: ignore[no-untyped-def]
    state = grp.state()
    assert state is not None
    return state


class Producer(SendLoop[int]):
    """Sends ``p0-<n>`` continuously through a FailoverSender; records every acknowledged
    body, when, and which broker acknowledged it."""

    def __init__(self, endpoints: list[str]) -> None:
        super().__init__(lambda: FailoverSender(endpoints, deadline_s=60), TOPIC, b"p")
        self.endpoints = endpoints

    def first_ack_after(self, t: float, not_by: str) -> float:
        """Seconds from ``t`` to the first ack after it by a broker other than ``not_by``
        (an ack of the killed master may still arrive just after the kill)."""
        return min(a.acked_s for a in self.acked_after(t) if self.endpoints[a.by] != not_by) - t


def _kill_and_recover(
    grp: ControllerGroup,
    producer: Producer,
    member_of: dict[str, str],
    how: signal.Signals = signal.SIGKILL,
) -> float:
    """Kill the master, wait for a new one and acks on it, restart the old one; returns
    seconds from the kill to the first acknowledged send after it."""
    old = _state(grp)
    wait_until(lambda: producer.acks_after(time.monotonic() - 1) > 5, 30, "sends flowing")
    victim = grp.procs[old.master]
    killed_at = time.monotonic()
    victim.process.send_signal(how)
    wait_until(lambda: _state(grp).epoch > old.epoch, 30, "a new master")
    wait_until(lambda: producer.acks_after(killed_at) >= 20, 30, "acks on the new master")
    assert _state(grp).master != old.master
    if how == signal.SIGKILL:
        victim.process.wait(10)
        grp.start(member_of[old.master])
    else:
        victim.process.send_signal(signal.SIGCONT)
    wait_until(lambda: old.master in _state(grp).in_sync, 60, "the old master back in sync")
    return producer.first_ack_after(killed_at, not_by=victim.endpoint)


def _check_nothing_lost(grp: ControllerGroup, acked: list[bytes]) -> None:
    master = grp.master()
    with RocketMQClient(master.endpoint) as client:
        stored = pull_all(client, TOPIC, 4)
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
    # every member converges to the master's bytes: the returning ones were cut right
    for node, proc in grp.procs.items():
        if node != _state(grp).master:
            wait_until(
                lambda p=proc: (
                    commitlog_bytes(p.store_dir)  # type: ignore[misc]
                    == commitlog_bytes(master.store_dir)
                ),
                30,
                f"{node} to match the master",
            )


def _members(grp: ControllerGroup) -> dict[str, str]:
    return {grp.node(m): m for m in grp.ports}


def test_failover_after_sigkill_loses_no_acknowledged_message(group: ControllerGroup) -> None:
    producer = Producer(group.endpoints())
    took_s = _kill_and_recover(group, producer, _members(group))
    acked = producer.stop()
    print(  # a figure, not a pass mark: timings belong to ./dev bench (issue 31)
        f"\nfailover: kill → first acknowledged send on the new master {took_s:.2f} s; "
        f"{len(acked)} acknowledged"
    )
    _check_nothing_lost(group, acked)


def test_controller_cli_shows_master_epoch_and_in_sync_set(group: ControllerGroup) -> None:
    result = CliRunner().invoke(
        cli, ["broker", "controller", "--controller", group.etcd.url, "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)["g"]
    state = _state(group)
    assert doc["state"]["master"] == state.master and doc["state"]["epoch"] == state.epoch
    assert sorted(doc["state"]["in_sync"]) == sorted(group.procs)
    assert {m["endpoint"] for m in doc["members"].values()} == set(group.endpoints())
    ids = EtcdGroup(group.etcd.url, "g").member_ids()
    names = {n: f"g/{ids[n]}" if n in ids else "g/0" for n in group.procs}
    assert doc["names"] == {n: names[n] for n in doc["members"]}
    table = CliRunner(env={"COLUMNS": "80"}).invoke(
        cli, ["broker", "controller", "--controller", group.etcd.url]
    )
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80, table.output
    row = next(line for line in table.output.splitlines() if line.startswith("│ g "))
    assert row.split("│")[2].strip() == names[state.master], table.output  # the master
    assert state.master not in table.output  # users' names, not controller node ids


def test_routes_follow_the_new_master(etcd: EtcdProcess, tmp_path: Path) -> None:
    ns, ns_addr = start_namesrv()
    grp = ControllerGroup(etcd, tmp_path, broker=SYNC, namesrv=ns_addr)
    try:
        for member in ("a", "b"):
            grp.start(member)
        wait_until(lambda: len(_state(grp).in_sync) == 2, 30, "both brokers in sync")
        with RocketMQClient(namesrv=ns_addr) as client:
            client.send(TOPIC, b"before")
            old = grp.master()
            assert _route_master(ns_addr) == old.endpoint
            old.kill()
            wait_until(
                lambda: _route_master(ns_addr) not in ("", old.endpoint),
                30,
                "the NameServer to route to the new master",
            )
            assert _route_master(ns_addr) == grp.master().endpoint
            wait_until(lambda: bool(client.send(TOPIC, b"after")), 30, "a send through routes")
    finally:
        grp.stop_all()
        ns.terminate()
        ns.wait(10)


def _route_master(ns_addr: str) -> str:
    info = cluster_info(ns_addr)
    data = info.brokers.get("g")
    return master_grpc_addr(data) or "" if data is not None else ""


@pytest.mark.slow
def test_ten_kills_in_a_row(group: ControllerGroup) -> None:
    producer = Producer(group.endpoints())
    times = [_kill_and_recover(group, producer, _members(group)) for _ in range(10)]
    acked = producer.stop()
    print(
        f"\n10 kills: kill → first ack p50 {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s; {len(acked)} acknowledged; each: "
        + " ".join(f"{t:.2f}" for t in times)
    )
    _check_nothing_lost(group, acked)
    assert _state(group).epoch == 11


@pytest.mark.slow
def test_split_brain_frozen_master_acks_nothing_and_rejoins(group: ControllerGroup) -> None:
    producer = Producer(group.endpoints())
    old = _state(group)
    frozen = group.procs[old.master]
    wait_until(lambda: producer.acks_after(time.monotonic() - 1) > 5, 30, "sends flowing")
    frozen.process.send_signal(signal.SIGSTOP)
    late: list[BaseException | None] = []

    def send_to_frozen() -> None:  # lands in the frozen master, answered after SIGCONT
        with RocketMQClient(frozen.endpoint, max_attempts=1, timeout_s=30) as client:
            try:
                client.send(TOPIC, b"sent-to-the-frozen-master")
                late.append(None)
            except RocketMQError as exc:
                late.append(exc)

    sender = threading.Thread(target=send_to_frozen)
    sender.start()
    wait_until(lambda: _state(group).epoch > old.epoch, 30, "a new master")
    stopped_at = time.monotonic()
    wait_until(lambda: producer.acks_after(stopped_at) >= 20, 30, "acks on the new master")
    frozen.process.send_signal(signal.SIGCONT)
    sender.join(60)
    assert late and late[0] is not None, "the deposed master acknowledged a send"
    print(f"\nthe deposed master answered: {late[0]}")
    wait_until(lambda: old.master in _state(group).in_sync, 60, "the old master back in sync")
    assert _state(group).master != old.master
    acked = producer.stop()
    assert b"sent-to-the-frozen-master" not in acked
    _check_nothing_lost(group, acked)


@pytest.mark.slow
def test_three_member_etcd_survives_a_member_kill(tmp_path: Path) -> None:
    etcd = EtcdCluster.start(tmp_path / "etcd")
    grp = ControllerGroup(etcd, tmp_path, broker=SYNC)
    try:
        for member in ("a", "b", "c"):
            grp.start(member)
        wait_until(lambda: len(_state(grp).in_sync) == 3, 30, "all three brokers in sync")
        before = _state(grp)
        etcd.members[0].process.kill()  # the endpoint every broker tries first
        etcd.members[0].process.wait(10)
        producer = Producer(grp.endpoints())
        wait_until(lambda: producer.acks_after(time.monotonic() - 1) > 20, 30, "sends flowing")
        assert _state(grp).epoch == before.epoch, "losing one etcd member caused a failover"
        took_s = _kill_and_recover(grp, producer, _members(grp))
        acked = producer.stop()
        print(f"\n3-member etcd, one member down: failover in {took_s:.2f} s")
        _check_nothing_lost(grp, acked)
    finally:
        grp.stop_all()
        etcd.stop()


def test_cluster_up_with_replicas_and_controller(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path, replicas=2, controller=True)
    try:
        local.start(1)
        etcd_group = EtcdGroup(local.etcd_url, "broker-a")

        def both_in_sync() -> bool:
            state = etcd_group.state()[0]
            return state is not None and len(state.in_sync) == 2

        wait_until(both_in_sync, 30, "both replicas of broker-a in sync")
        members = etcd_group.members()
        assert {m["endpoint"] for m in members.values()} == set(local.endpoints.values())
        with RocketMQClient(namesrv=local.namesrv) as client:
            assert client.send(TOPIC, b"through the routes").message_id
    finally:
        local.stop()
    assert local.etcd_process is not None and local.etcd_process.poll() is not None


def test_a_master_that_stops_renewing_is_fenced_before_its_lease_expires(
    etcd: EtcdProcess, tmp_path: Path
) -> None:
    agent = ControllerAgent(etcd.url, "fence", str(tmp_path / "store"))
    assert agent.join(timeout_s=10).broker_id == 0  # the group's first broker
    assert agent.fence() == ""
    etcd_group = EtcdGroup(etcd.url, "fence")
    # no loop runs: the lease is not renewed any more, as in a frozen or cut-off master
    wait_until(lambda: agent.fence() != "", 5, "the master to fence itself")
    assert agent.node in etcd_group.members(), "fenced only after etcd expired the lease"
    fenced_at = time.monotonic()
    wait_until(lambda: agent.node not in etcd_group.members(), 10, "etcd to expire the lease")
    print(f"\nfenced {time.monotonic() - fenced_at:.2f} s before etcd expired the lease")
    assert "lease" in agent.fence()
