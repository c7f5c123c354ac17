"""Registration -> route, cluster info and topic list, against a real NameServer process."""

from __future__ import annotations

import json

import pytest

from broker_core.errors import TopicNotFoundError
from broker_core.namesrv.client import NameServerClient, QueueData, TopicQueueConfig
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from tests.namesrv.conftest import registration


def test_registration_gives_route_cluster_info_and_topic_list(ns_client: NameServerClient):
    topics = {"t-route-1": TopicQueueConfig(4, 4), "t-route-2": TopicQueueConfig(2, 3, perm=4)}
    a = registration("route-a", addr="127.0.0.1:20911", topics=topics)
    b = registration(
        "route-b", addr="127.0.0.1:21911", topics={"t-route-1": TopicQueueConfig(8, 8)}
    )
    assert ns_client.register_broker(a) == [""]
    assert ns_client.register_broker(b) == [""]

    route = ns_client.get_route("t-route-1")
    assert route.topic == "t-route-1"
    assert route.queue_datas == [QueueData("route-a", 4, 4, 6), QueueData("route-b", 8, 8, 6)]
    assert [(d.broker_name, d.broker_addrs, d.grpc_addrs) for d in route.broker_datas] == [
        ("route-a", {0: "127.0.0.1:20911"}, {0: "127.0.0.1:21911"}),
        ("route-b", {0: "127.0.0.1:21911"}, {0: "127.0.0.1:22911"}),
    ]
    assert ns_client.get_route("t-route-2").queue_datas == [QueueData("route-a", 2, 3, 4)]

    info = ns_client.get_cluster_info()
    assert {"route-a", "route-b"} <= set(info.clusters["DefaultCluster"])
    assert info.brokers["route-b"].broker_addrs == {0: "127.0.0.1:21911"}
    live = {x.broker_addr: x for x in info.live}
    assert live["127.0.0.1:20911"].data_version == a.data_version
    assert live["127.0.0.1:20911"].grpc_addr == "127.0.0.1:21911"
    assert {"t-route-1", "t-route-2"} <= set(ns_client.get_all_topics())


def test_unknown_topic_is_topic_not_found(ns_client: NameServerClient):
    with pytest.raises(TopicNotFoundError, match="no-such-topic"):
        ns_client.get_route("no-such-topic")


def test_route_json_is_standard_with_quoted_broker_ids(namesrv, ns_client: NameServerClient):
    ns_client.register_broker(
        registration("json-a", addr="127.0.0.1:23911", topics={"t-json": TopicQueueConfig(1, 1)})
    )
    raw = RemotingClient(namesrv[1])
    try:
        resp = raw.invoke(
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t-json"})
        )
    finally:
        raw.close()
    assert resp.code == ResponseCode.SUCCESS
    text = resp.body.decode()
    assert '"brokerAddrs":{"0":"127.0.0.1:23911"}' in text
    assert json.loads(text)["brokerDatas"][0]["grpcAddrs"] == {"0": "127.0.0.1:24911"}
