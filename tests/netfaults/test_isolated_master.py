"""A master cut off from etcd and from its slaves while clients still reach it.

Three brokers of group ``g`` (sync replication) and etcd, each in its own namespace;
clients in the root namespace send through every broker in turn (``HistoryLoad``). The
master is partitioned from etcd and both slaves — the split brain of RocketMQ #5663 /
#7017 / #7689, where a deposed master kept acknowledging. It must:

* acknowledge no send invoked after its lease (``LEASE_TTL_S``) ran out: by then a new
  master may be elected (a send invoked later reaches the broker later still, so this
  bound does not depend on scheduling);
* let a slave be elected, and clients resume on it;
* after the heal, rejoin as a slave and cut what it stored but never had acknowledged:
  its commitlog becomes byte for byte the new master's;
* and the history checker finds nothing acknowledged lost and nothing read that was not
  sent.

The short version (normal suite) isolates a single master from etcd: it stops
acknowledging within its lease and, healed, serves again with nothing lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.ha.controller import LEASE_TTL_S
from tests.ha.conftest import commitlog_bytes, wait_until
from tests.history import History, check
from tests.netfaults.cluster import ETCD, SYNC, NetGroup
from tests.netfaults.load import HistoryLoad, read_all
from tests.netfaults.net import Network

pytestmark = pytest.mark.skipif(
    not Path(ETCD).exists(), reason="etcd is not installed (./dev installs etcd-server)"
)
TOPIC = "NetFaults"


@pytest.fixture
def group(network: Network, tmp_path: Path) -> Iterator[NetGroup]:
    grp = NetGroup(network, tmp_path, broker=SYNC)
    try:
        yield grp
    finally:
        grp.stop()


def start(grp: NetGroup, brokers: list[str]) -> None:
    grp.network.add("etcd")
    for name in brokers:
        grp.network.add(name)
    grp.start_etcd(["etcd"])
    for name in brokers:
        grp.start_broker(name)
    wait_until(lambda: len(grp.in_sync()) == len(brokers), 60, "every broker in sync")


def acks_by_after(load: HistoryLoad, broker: int, t: float) -> list[str]:
    return [a.body for a in list(load.acked_by) if a.broker == broker and a.invoked_s > t]


@pytest.mark.slow
def test_isolated_master_is_deposed_and_rejoins_as_slave(group: NetGroup, chaos_figures) -> None:
    start(group, ["a", "b", "c"])
    old, old_epoch = group.master(), group.state().epoch
    history = History()
    load = HistoryLoad(group.endpoints(), TOPIC, history, senders=2).start()
    try:
        load.wait_acks_after(0, 50, 30, "sends flowing")
        history.fault("isolate master from etcd and slaves")
        cut_at = history.faults[-1][0]
        for other in ("etcd", *(n for n in ("a", "b", "c") if n != old)):
            group.network.partition(old, other)
        wait_until(lambda: group.state().epoch > old_epoch, 60, "a new master")
        new = group.master()
        assert new != old
        load.wait_acks_after(cut_at, 50, 60, "acks on the new master")
        history.fault("heal")
        group.network.heal()
        wait_until(lambda: group.in_sync() == {"a", "b", "c"}, 90, "the old master back in sync")
        load.wait_acks_after(history.faults[-1][0], 50, 60, "acks after the heal")
    finally:
        load.stop()
    old_index = list(group.procs).index(old)
    late = acks_by_after(load, old_index, cut_at + LEASE_TTL_S)
    assert late == [], f"the deposed master acknowledged sends invoked after its lease: {late}"
    assert group.master() == new
    wait_until(
        lambda: (
            commitlog_bytes(group.procs[old].store_dir)
            == commitlog_bytes(group.procs[new].store_dir)
        ),
        60,
        "the old master's commitlog to equal the new master's",
    )
    read_all(group.procs[new].endpoint, TOPIC, history)
    report = check(history)
    cut = [
        line.split(": ")[-1].strip() for line in group.procs[old].output if "cut its log" in line
    ]
    chaos_figures(
        "netfaults isolated master", summary=f"{report.summary()}; old master's cut: {cut or '-'}"
    )
    report.assert_valid()


def test_master_cut_from_etcd_stops_acking_within_its_lease(group: NetGroup, chaos_figures) -> None:
    """Short version: one master, etcd out of reach for a while."""
    start(group, ["a"])
    history = History()
    load = HistoryLoad(group.endpoints(), TOPIC, history, senders=1).start()
    try:
        load.wait_acks_after(0, 20, 30, "sends flowing")
        history.fault("partition master from etcd")
        cut_at = history.faults[-1][0]
        group.network.partition("a", "etcd")
        wait_until(lambda: len(load.failures) > 0, 30, "the master to refuse sends")
        history.fault("heal")
        group.network.heal()
        load.wait_acks_after(history.faults[-1][0], 20, 60, "acks after the heal")
    finally:
        load.stop()
    late = [
        a.body for a in load.acked_by if cut_at + LEASE_TTL_S < a.invoked_s < history.faults[-1][0]
    ]
    assert late == [], f"acknowledged without a lease: {late}"
    read_all(group.procs["a"].endpoint, TOPIC, history)
    report = check(history)
    chaos_figures("netfaults master cut from etcd", summary=report.summary())
    report.assert_valid()
