"""RouteTable rules, in process with a fake clock (no network)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker_core.errors import StaleRegistrationError, TopicNotFoundError
from broker_core.namesrv.client import QueueData, TopicQueueConfig
from broker_core.namesrv.route_table import RouteTable
from tests.namesrv.conftest import registration


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def table(clock: Clock) -> RouteTable:
    return RouteTable(broker_expiry_ms=10_000, clock_s=clock)


def test_master_and_slave_share_a_group_and_the_slave_learns_the_master(table: RouteTable):
    assert table.register(registration("a", addr="h:1"), channel_id=1).master_addr == ""
    result = table.register(registration("a", broker_id=1, addr="h:2"), channel_id=2)
    assert (result.master_addr, result.ha_server_addr) == ("h:1", "h:2")
    (data,) = table.route("orders").broker_datas
    assert data.broker_addrs == {0: "h:1", 1: "h:2"}


def test_only_the_master_updates_queue_data_while_it_lives(table: RouteTable):
    table.register(registration("a", addr="h:1", counter=1))
    slave_topics = {"orders": TopicQueueConfig(1, 1), "other": TopicQueueConfig(2, 2)}
    table.register(registration("a", broker_id=1, addr="h:2", topics=slave_topics, counter=9))
    assert table.topics() == ["orders"]
    assert table.route("orders").queue_datas == [QueueData("a", 4, 4, 6)]


def test_lowest_slave_updates_queue_data_when_there_is_no_master(table: RouteTable):
    table.register(registration("a", broker_id=2, addr="h:3", counter=1))
    table.register(registration("a", broker_id=1, addr="h:2", topics={"x": TopicQueueConfig(3, 3)}))
    assert table.topics() == ["x"]


def test_a_new_data_version_replaces_the_groups_topics(table: RouteTable):
    two = {"t1": TopicQueueConfig(4, 4), "t2": TopicQueueConfig(4, 4)}
    table.register(registration("a", addr="h:1", topics=two, counter=1))
    table.register(registration("b", addr="h:9", topics={"t2": TopicQueueConfig(2, 2)}))
    table.register(registration("a", addr="h:1", topics={"t2": TopicQueueConfig(8, 8)}, counter=2))
    assert table.topics() == ["t2"]
    assert table.route("t2").queue_datas == [QueueData("a", 8, 8, 6), QueueData("b", 2, 2, 6)]
    with pytest.raises(TopicNotFoundError, match="t1"):
        table.route("t1")


def test_same_data_version_does_not_rewrite_queue_data(table: RouteTable):
    reg = registration("a", addr="h:1", counter=5)
    table.register(reg)
    table.register(registration("a", broker_id=1, addr="h:2"))  # slave: no effect
    table.register(replace(reg, topics={}))
    assert table.topics() == ["orders"]


def test_an_address_holds_one_id_slave_promoted_to_master(table: RouteTable):
    table.register(registration("a", broker_id=1, addr="h:2"))
    table.register(registration("a", broker_id=0, addr="h:2"))
    assert table.cluster_info().brokers["a"].broker_addrs == {0: "h:2"}


def test_older_state_version_claiming_a_live_id_is_refused(table: RouteTable):
    table.register(registration("a", addr="h:1", state_version=5))
    with pytest.raises(StaleRegistrationError, match="held by h:1 with state version 5"):
        table.register(registration("a", addr="h:7", state_version=4))
    info = table.cluster_info()
    assert info.brokers["a"].broker_addrs == {0: "h:1"}
    assert [x.broker_addr for x in info.live] == ["h:1"]


def test_newer_or_equal_state_version_takes_the_id_over(table: RouteTable):
    table.register(registration("a", addr="h:1", state_version=5))
    table.register(registration("a", addr="h:7", state_version=5))
    assert table.cluster_info().brokers["a"].broker_addrs == {0: "h:7"}


def test_expiry_uses_the_shorter_of_broker_timeout_and_server_cap(table, clock):
    table.register(registration("a", addr="h:1", heartbeat_timeout_ms=2_000))
    table.register(registration("b", addr="h:2", heartbeat_timeout_ms=60_000))
    clock.now_s += 2.5
    assert [live.broker_addr for live, _ in table.scan_expired()] == ["h:1"]
    assert table.heartbeat("DefaultCluster", "h:2")
    clock.now_s += 9.9
    assert table.scan_expired() == []
    clock.now_s += 0.2
    assert [live.broker_name for live, _ in table.scan_expired()] == ["b"]
    assert table.topics() == [] and table.cluster_info().clusters == {}


def test_connection_close_removes_what_it_registered_only(table: RouteTable):
    table.register(registration("a", addr="h:1"), channel_id=1)
    table.register(registration("a", broker_id=1, addr="h:2"), channel_id=2)
    table.register(registration("a", addr="h:1"), channel_id=3)  # re-registered on a new one
    assert table.on_channel_closed(1) == []
    removed = table.on_channel_closed(2)
    assert [x.broker_addr for x in removed] == ["h:2"]
    assert table.route("orders").broker_datas[0].broker_addrs == {0: "h:1"}
    table.on_channel_closed(3)
    with pytest.raises(TopicNotFoundError):
        table.route("orders")


def test_unregister_removes_one_replica_and_then_the_group(table: RouteTable):
    table.register(registration("a", addr="h:1"))
    table.register(registration("a", broker_id=1, addr="h:2"))
    assert not table.unregister("DefaultCluster", "a", 0, "h:9")
    assert table.unregister("DefaultCluster", "a", 0, "h:1")
    assert table.route("orders").broker_datas[0].broker_addrs == {1: "h:2"}
    assert table.unregister("DefaultCluster", "a", 1, "h:2")
    assert table.cluster_info().brokers == {}
    assert table.topics() == []


def test_heartbeat_of_an_unknown_broker_is_reported(table: RouteTable):
    assert not table.heartbeat("DefaultCluster", "h:404")
