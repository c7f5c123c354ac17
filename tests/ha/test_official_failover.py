"""The official ``rocketmq`` Producer, given every broker's gRPC endpoint (``"h:p1;h:p2"``),
keeps sending across a controller-mode failover (issue 15 item 5).

Two brokers of group ``g`` with sync replication on a real etcd; one thread sends with the
official client, synchronously, one message at a time; the master is SIGKILLed. Sends must
succeed again once the new master is elected (the client's own retries, plus ours on an
error), and every acknowledged body must be readable from the new master exactly once
(a duplicate can only be a send in flight at the kill, stored and then sent again by the
client's own retries: a body whose send raised is never sent again by us). With
``namesrv`` the brokers also register with a NameServer, so QueryRoute answers from the
cluster's routes (``server/cluster_view.py``).
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError
from broker_core.namesrv.client import NameServerClient
from tests.cluster_procs import start_namesrv, stop_namesrv
from tests.ha.conftest import pull_all, wait_until
from tests.ha.controller_procs import ETCD, ControllerGroup, EtcdProcess
from tests.send_loop import OfficialProducer, SendLoop

pytestmark = pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed")

SYNC = {"replication": "sync", "sync_replication_timeout_ms": 2_000, "ha_catch_up_window_ms": 3_000}
TOPIC = "OfficialFailover"
ROUTE_FIRST_REFRESH_S = 10  # the official client refreshes routes 10 s after start, then every 30 s


def official_sends(endpoints: str) -> SendLoop[str]:
    """One thread sends ``o0-<n>`` with the official Producer through ``endpoints``; each ack
    records the broker group the client chose (``Acked.by``). A send that raised is not sent
    again (``failed``): it may have been stored anyway."""
    return SendLoop(lambda: OfficialProducer(endpoints, TOPIC), TOPIC, b"o", retry_pause_s=0.05)


@pytest.fixture(params=["direct", "namesrv"])
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControllerGroup]:
    """The group; with "namesrv" its brokers also register with a NameServer, so
    QueryRoute answers from the cluster's routes (``server/cluster_view.py``)."""
    etcd = EtcdProcess.start(tmp_path / "etcd")
    ns, ns_addr = start_namesrv() if request.param == "namesrv" else (None, "")
    grp = ControllerGroup(etcd, tmp_path, broker=SYNC, namesrv=ns_addr)
    try:
        for member in ("a", "b"):
            grp.start(member)
        wait_until(lambda: len(grp.state().in_sync) == 2, 30, "both brokers in sync")  # type: ignore[union-attr]
        yield grp
    finally:
        grp.stop_all()
        etcd.stop()
        if ns is not None:
            stop_namesrv(ns)


def test_official_producer_keeps_sending_across_a_failover(group: ControllerGroup) -> None:
    old = group.state()
    assert old is not None
    with RocketMQClient(group.procs[old.master].endpoint) as client:
        client.create_topic(TOPIC, queues=4)
    for endpoint in group.endpoints():  # the client may ask the slave for the route first
        with RocketMQClient(endpoint) as client:
            wait_until(lambda c=client: bool(c.query_route(TOPIC)), 30, "the topic everywhere")  # type: ignore[misc]
    sender = official_sends(";".join(e for e in group.endpoints()))
    try:
        wait_until(lambda: len(sender.acked) > 20, 30, "official sends flowing")
        killed_at = time.monotonic()
        group.procs[old.master].process.send_signal(signal.SIGKILL)
        wait_until(
            lambda: (s := group.state()) is not None and s.epoch > old.epoch, 30, "a new master"
        )
        wait_until(
            lambda: len(sender.started_after(killed_at)) >= 20,
            40,
            f"official sends acknowledged after the kill (errors: {sender.errors[-3:]})",
        )
    finally:
        acked = sender.stop()
    first_s = min(a.acked_s for a in sender.started_after(killed_at)) - killed_at
    print(
        f"\nofficial client failover: kill → first acknowledged send {first_s:.2f} s; "
        f"{len(acked)} acknowledged, {len(sender.failed)} failed sends"
    )
    new = group.state()
    assert new is not None and new.master != old.master
    with RocketMQClient(group.procs[new.master].endpoint) as client:
        stored = collections.Counter(pull_all(client, TOPIC, 4))
    missing = [b for b in acked if b not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    in_flight = {a.body for a in sender.acked if a.started_s < killed_at < a.acked_s}
    twice = {b for b in acked if stored[b] > 1}
    unexplained = twice - in_flight
    assert not unexplained, f"stored more than once, sent once: {sorted(unexplained)[:5]}"


def _route_lists_both_members(ns_addr: str, group: str) -> bool:
    client = NameServerClient(ns_addr)
    try:
        datas = {b.broker_name: b for b in client.get_route(TOPIC).broker_datas}
    except RocketMQError:
        return False
    finally:
        client.close()
    return group in datas and len(datas[group].grpc_addrs) == 2


@pytest.mark.slow
def test_official_producer_reaches_another_group_across_its_failover(tmp_path: Path) -> None:
    """Groups ``a`` and ``b`` (two brokers each) register with a NameServer; the official
    Producer dials group ``a`` only, so it learns group ``b`` from the routes. b's master
    is killed after the client's first route refresh; sends the client routes to b's
    queues must be stored by b's new master well before its next refresh, 30 s later
    (before: b's queues named only the dead master, every send to them failed over to
    a's queues until that refresh)."""
    etcd = EtcdProcess.start(tmp_path / "etcd")
    ns, ns_addr = start_namesrv()
    groups = {
        g: ControllerGroup(etcd, tmp_path / g, name=g, broker=SYNC, namesrv=ns_addr)
        for g in ("a", "b")
    }
    sender = None
    try:
        for grp in groups.values():
            grp.start("m1")
            grp.start("m2")
        for grp in groups.values():
            wait_until(lambda g=grp: len(g.state().in_sync) == 2, 30, "both in sync")  # type: ignore[misc]
            with RocketMQClient(grp.master().endpoint) as client:
                client.create_topic(TOPIC, queues=2)
        wait_until(lambda: _route_lists_both_members(ns_addr, "b"), 30, "b's members routed")
        sender = official_sends(";".join(groups["a"].endpoints()))
        wait_until(
            lambda: any(a.by == "b" for a in list(sender.acked)),  # type: ignore[union-attr]
            30,
            "official sends reaching b",
        )
        started_at = sender.acked[0].started_s  # the first send: after the client's start
        refreshed_at = started_at + ROUTE_FIRST_REFRESH_S + 1
        wait_until(lambda: time.monotonic() > refreshed_at, 15, "the client's first refresh")
        old = groups["b"].state()
        assert old is not None
        killed_at = time.monotonic()
        groups["b"].procs[old.master].process.send_signal(signal.SIGKILL)
        wait_until(lambda: groups["b"].state().epoch > old.epoch, 30, "a new master of b")  # type: ignore[union-attr]

        def b_acked_after_kill() -> list[float]:
            assert sender is not None
            return [a.acked_s for a in sender.started_after(killed_at) if a.by == "b"]

        wait_until(lambda: len(b_acked_after_kill()) >= 5, 20, "sends stored in b again")
        first_s = min(b_acked_after_kill()) - killed_at
        acked = sender.stop()
        sender = None
        print(
            f"\nofficial client, other group's failover: kill → first send stored in b "
            f"{first_s:.2f} s"
        )
        stored: collections.Counter[bytes] = collections.Counter()
        for grp in groups.values():
            with RocketMQClient(grp.master().endpoint) as client:
                stored.update(pull_all(client, TOPIC, 2))
        missing = [b for b in acked if b not in stored]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    finally:
        if sender is not None:
            sender.stop()
        for grp in groups.values():
            grp.stop_all()
        etcd.stop()
        stop_namesrv(ns)
