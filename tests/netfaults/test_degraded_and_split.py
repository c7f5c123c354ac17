"""Slow network-fault scenarios on a controller-mode group (each node its own namespace).

* A slave behind a bad link (20 % loss, 50 ms ± 20 ms each way) under sync replication:
  every failure is retriable, and acknowledged means replicated — the master is then
  SIGKILLed while the link is still bad, and whoever masters the group afterwards (the
  slave if it was in sync, else the restarted master) must serve every acknowledged
  message. Throughput before and during the fault is reported.
* etcd split 2/1, with one broker on the minority side: the minority member accepts no
  write, the group's master and epoch stay, the controller keeps working through the
  majority (sends acknowledged throughout), and after the heal the cut-off broker is back
  in sync with nothing acknowledged lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.errors import RocketMQError
from broker_core.ha.etcd_state import EtcdGroup
from tests.ha.conftest import wait_until
from tests.history import History, check
from tests.netfaults.cluster import ETCD, ETCD_CLIENT_PORT, SYNC, NetGroup
from tests.netfaults.load import HistoryLoad, read_all
from tests.netfaults.net import Network

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed"),
]
TOPIC = "NetFaults"
DEGRADED_ACKS = 300  # acknowledged over the bad link before the master is killed


@pytest.fixture
def group(network: Network, tmp_path: Path) -> Iterator[NetGroup]:
    grp = NetGroup(network, tmp_path, broker=SYNC)
    try:
        yield grp
    finally:
        grp.stop()


def rate(load: HistoryLoad, start: float, end: float) -> float:
    """Acknowledged sends per second among those invoked in [start, end)."""
    return sum(1 for a in list(load.acked_by) if start <= a.invoked_s < end) / (end - start)


def test_slave_behind_a_lossy_slow_link(group: NetGroup, chaos_figures) -> None:
    for name in ("etcd", "a", "b"):
        group.network.add(name)
    group.start_etcd(["etcd"])
    group.start_broker("a")
    group.start_broker("b")
    wait_until(lambda: group.in_sync() == {"a", "b"}, 60, "both brokers in sync")
    history = History()
    load = HistoryLoad(group.endpoints(), TOPIC, history, senders=2).start()
    try:
        began = time.monotonic()
        load.wait_acks_after(0, 100, 30, "sends flowing")
        history.fault("degrade the slave's link")
        degraded_at = history.faults[-1][0]
        group.network.degrade("b", loss=0.2, delay_ms=50, jitter_ms=20)
        load.wait_acks_after(degraded_at, DEGRADED_ACKS, 120, "acks over the bad link")
        in_sync_at_kill = group.in_sync()
        killed_at = time.monotonic()
        history.fault("SIGKILL the master (link still bad)")
        group.procs["a"].kill()
        if "b" in in_sync_at_kill:
            wait_until(lambda: group.master() == "b", 60, "the slave to take over")
        group.network.heal()
        if "b" not in in_sync_at_kill:
            group.start_broker("a")
        load.wait_acks_after(killed_at, 50, 60, "acks after the kill")
    finally:
        load.stop()
    master = group.master()
    read_all(group.procs[master].endpoint, TOPIC, history)
    report = check(history)
    chaos_figures(
        "netfaults lossy slow slave",
        summary=f"{report.summary()}; acks/s before {rate(load, began, degraded_at):.0f}, "
        f"degraded {rate(load, degraded_at, killed_at):.0f}; in sync at the kill "
        f"{sorted(in_sync_at_kill)}; master after {master}",
    )
    report.assert_valid()


def test_etcd_split_two_one(group: NetGroup, chaos_figures) -> None:
    for name in ("e1", "e2", "e3", "a", "b"):
        group.network.add(name)
    group.start_etcd(["e1", "e2", "e3"])
    group.start_broker("a")
    group.start_broker("b")
    wait_until(lambda: group.in_sync() == {"a", "b"}, 60, "both brokers in sync")
    before = group.state()
    history = History()
    load = HistoryLoad(group.endpoints(), TOPIC, history, senders=2).start()
    minority = EtcdGroup(f"http://{group.network.nodes['e3'].ip}:{ETCD_CLIENT_PORT}", "g")
    try:
        load.wait_acks_after(0, 50, 30, "sends flowing")
        history.fault("split etcd 2/1, slave b with the minority")
        split_at = history.faults[-1][0]
        for majority_side in ("e1", "e2", "a"):
            group.network.partition("e3", majority_side)
            group.network.partition("b", majority_side)
        wait_until(lambda: not _writable(minority), 30, "the minority member to refuse writes")
        load.wait_acks_after(split_at, 200, 60, "acks through the majority")
        during = group.state()
        assert (during.master, during.epoch) == (before.master, before.epoch)
        assert not _writable(minority), "the minority member accepted a write"
        history.fault("heal")
        group.network.heal()
        wait_until(lambda: group.in_sync() == {"a", "b"}, 90, "the slave back in sync")
        load.wait_acks_after(history.faults[-1][0], 50, 60, "acks after the heal")
    finally:
        load.stop()
    after = group.state()
    assert (after.master, after.epoch) == (before.master, before.epoch)
    read_all(group.procs[group.master()].endpoint, TOPIC, history)
    report = check(history)
    chaos_figures(
        "netfaults etcd split 2/1",
        summary=f"{report.summary()}; in sync during the split {sorted(during.in_sync)}",
    )
    report.assert_valid()


def _writable(group: EtcdGroup) -> bool:
    """Whether a lease can be granted through this endpoint (a write needing quorum)."""
    try:
        group.grant(5)
    except RocketMQError:
        return False
    return True
