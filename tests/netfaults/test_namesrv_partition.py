"""A NameServer cut off from the brokers but not from the clients, then healed.

Two brokers (groups ``b1``, ``b2``) register with a NameServer, each in its own
namespace. The NameServer is partitioned from both brokers; clients (root namespace)
still reach everyone. The brokers' routes must age out at the NameServer (no live broker,
no route), while clients keep sending — to the brokers directly and through a cluster
client that learned its routes before the fault — with every failure retriable; after the
heal the routes come back. The history checker finds nothing acknowledged lost.
"""

from __future__ import annotations

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError
from broker_core.namesrv.client import NameServerClient
from tests.ha.conftest import wait_until
from tests.history import History, check
from tests.netfaults.cluster import NAMESRV_PORT, start_member, start_namesrv
from tests.netfaults.load import HistoryLoad, read_all
from tests.netfaults.net import Network

TOPIC = "NetFaultsRoutes"


def routed_brokers(addr: str) -> set[str]:
    client = NameServerClient(addr)
    try:
        return {b.broker_name for b in client.get_route(TOPIC).broker_datas}
    except RocketMQError:
        return set()
    finally:
        client.close()


def live_brokers(addr: str) -> set[str]:
    client = NameServerClient(addr)
    try:
        return {b.broker_name for b in client.get_cluster_info().live}
    finally:
        client.close()


@pytest.mark.slow
def test_namesrv_partitioned_from_brokers_not_clients(
    network: Network, tmp_path, chaos_figures
) -> None:
    ns = network.add("ns")
    namesrv = start_namesrv(ns, scan_interval_ms=200, broker_expiry_ms=2_000)
    addr = f"{ns.ip}:{NAMESRV_PORT}"
    brokers = {}
    history = History()
    loads: list[HistoryLoad] = []
    try:
        for name in ("b1", "b2"):
            brokers[name] = start_member(network.add(name), tmp_path / name, name, addr)
            with RocketMQClient(brokers[name].endpoint) as admin:
                admin.create_topic(TOPIC, queues=2)
        wait_until(lambda: routed_brokers(addr) == {"b1", "b2"}, 30, "routes to both brokers")
        endpoints = [b.endpoint for b in brokers.values()]
        loads = [
            HistoryLoad(endpoints, TOPIC, history, senders=1, prefix="direct").start(),
            HistoryLoad(
                endpoints, TOPIC, history, senders=1, prefix="routed", namesrv=addr
            ).start(),
        ]
        for load in loads:
            load.wait_acks_after(0, 30, 30, "sends flowing")
        history.fault("partition the NameServer from the brokers")
        cut_at = history.faults[-1][0]
        for name in brokers:
            network.partition("ns", name)
        wait_until(lambda: live_brokers(addr) == set(), 30, "the brokers to age out")
        assert routed_brokers(addr) == set()
        for load in loads:
            load.wait_acks_after(cut_at, 30, 60, "sends while the routes are gone")
        history.fault("heal")
        network.heal()
        wait_until(lambda: routed_brokers(addr) == {"b1", "b2"}, 30, "the routes back")
        for load in loads:
            load.wait_acks_after(history.faults[-1][0], 30, 60, "sends after the heal")
        for load in loads:
            load.stop()
        loads = []
        for proc in brokers.values():
            read_all(proc.endpoint, TOPIC, history)
    finally:
        for load in loads:
            load.stop()
        for proc in brokers.values():
            proc.stop()
        namesrv.terminate()
        namesrv.wait(15)
    report = check(history)
    chaos_figures("netfaults NameServer partitioned from brokers", summary=report.summary())
    report.assert_valid()
