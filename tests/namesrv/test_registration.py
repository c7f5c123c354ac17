"""Registration over the wire: stale data versions, several independent NameServers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from broker_core.errors import RemotingCommandError, RemotingConnectError, TopicNotFoundError
from broker_core.namesrv.client import NameServerClient, TopicQueueConfig
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from tests.cluster_procs import NamesrvProcess, start_namesrv, stop_namesrv
from tests.namesrv.conftest import registration


@pytest.fixture()
def two_namesrvs() -> Iterator[list[tuple[NamesrvProcess, str]]]:
    procs = [start_namesrv(), start_namesrv()]
    yield procs
    for proc, _ in procs:
        if proc.poll() is None:
            assert stop_namesrv(proc) == 0, "".join(proc.output[-40:])


def test_a_stale_claim_on_a_live_broker_id_is_refused_and_changes_nothing(namesrv):
    holder, impostor = NameServerClient(namesrv[1]), NameServerClient(namesrv[1])
    topics = {"t-stale": TopicQueueConfig(2, 2)}
    try:
        holder.register_broker(
            registration("stale", addr="127.0.0.1:40911", state_version=5, topics=topics)
        )
        older = registration("stale", addr="127.0.0.1:41911", state_version=3, topics={})
        with pytest.raises(RemotingCommandError, match="state version 5") as err:
            impostor.register_broker(older)
        assert err.value.code == ResponseCode.SYSTEM_ERROR
        route = holder.get_route("t-stale")
        assert route.broker_datas[0].broker_addrs == {0: "127.0.0.1:40911"}
        live = [x.broker_addr for x in holder.get_cluster_info().live if x.broker_name == "stale"]
        assert live == ["127.0.0.1:40911"]
        newer = registration("stale", addr="127.0.0.1:41911", state_version=6, topics=topics)
        assert impostor.register_broker(newer) == [""]
        assert holder.get_route("t-stale").broker_datas[0].broker_addrs == {0: "127.0.0.1:41911"}
    finally:
        holder.close()
        impostor.close()


def test_slave_registration_answers_the_masters_addresses(namesrv):
    master, slave = NameServerClient(namesrv[1]), NameServerClient(namesrv[1])
    try:
        master.register_broker(registration("ha", addr="127.0.0.1:42911"))
        (result,) = slave.register_broker_results(
            registration("ha", broker_id=1, addr="127.0.0.1:42921")
        )
        assert (result.master_addr, result.ha_server_addr) == ("127.0.0.1:42911", "127.0.0.1:42912")
    finally:
        master.close()
        slave.close()


def test_nameservers_are_independent(two_namesrvs):
    (proc1, addr1), (_, addr2) = two_namesrvs
    only1, both = NameServerClient(addr1), NameServerClient([addr1, addr2])
    reader2 = NameServerClient(addr2)
    try:
        only1.register_broker(
            registration("one", addr="127.0.0.1:43911", topics={"t-one": TopicQueueConfig(1, 1)})
        )
        assert only1.get_route("t-one").queue_datas[0].broker_name == "one"
        with pytest.raises(TopicNotFoundError):
            reader2.get_route("t-one")

        both_reg = registration(
            "both", addr="127.0.0.1:44911", topics={"t-both": TopicQueueConfig(1, 1)}
        )
        assert both.register_broker(both_reg) == ["", ""]
        assert reader2.get_route("t-both").broker_datas[0].broker_name == "both"

        proc1.kill()
        proc1.wait(10)
        # reads fall over to the second NameServer; registration reports the dead one
        assert both.get_route("t-both").broker_datas[0].broker_name == "both"
        results = both.register_broker(both_reg)
        assert results[0].startswith(f"cannot connect to {addr1}") and results[1] == ""
        with pytest.raises(RemotingConnectError, match="every NameServer failed"):
            only1.register_broker(both_reg)
    finally:
        for client in (only1, both, reader2):
            client.close()


def test_java_style_wrapped_body_is_accepted(namesrv):
    """A 4.x Java broker wraps the topic table and may write the counter as an object."""
    body = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {
                "t-java": {
                    "topicName": "t-java",
                    "readQueueNums": 3,
                    "writeQueueNums": 3,
                    "perm": 6,
                }
            },
            "dataVersion": {"timestamp": 1700000000000, "counter": {"value": 4}},
        },
        "filterServerList": [],
    }
    raw = RemotingClient(namesrv[1])
    try:
        request = RemotingCommand.request(
            RequestCode.REGISTER_BROKER,
            {
                "clusterName": "c",
                "brokerName": "java",
                "brokerId": "0",
                "brokerAddr": "127.0.0.1:45911",
            },
            json.dumps(body).encode(),
        )
        assert raw.invoke(request).code == ResponseCode.SUCCESS
        route_req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t-java"})
        resp = raw.invoke(route_req)
        assert resp.code == ResponseCode.SUCCESS
        assert json.loads(resp.body)["queueDatas"][0]["readQueueNums"] == 3
    finally:
        raw.close()


HEADER = {"clusterName": "c", "brokerName": "x", "brokerId": "0", "brokerAddr": "h:1"}


@pytest.mark.parametrize(
    ("fields", "body", "message"),
    [
        ({**HEADER, "clusterName": None}, b"{}", "missing 'clusterName'"),
        ({**HEADER, "brokerId": "zero"}, b"{}", "'brokerId' is not an integer"),
        ({**HEADER, "compressed": "true"}, b"{}", "compressed registration bodies"),
        (HEADER, b"{not json", "registration body is not JSON"),
        (HEADER, b"[" * 100_000, "nested too deeply"),
        (HEADER, b"[]", "not a JSON object"),
        (HEADER, b'{"topicConfigTable": {"t": {"readQueueNums": "many"}}}', "readQueueNums"),
        (HEADER, b'{"dataVersion": {"counter": 1}}', "timestamp"),
    ],
)
def test_malformed_registrations_get_a_clear_error(namesrv, fields, body, message):
    fields = {k: v for k, v in fields.items() if v is not None}
    raw = RemotingClient(namesrv[1])
    try:
        resp = raw.invoke(RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert message in resp.remark
        topics = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert raw.invoke(topics).code == ResponseCode.SUCCESS  # the same connection serves on
    finally:
        raw.close()
