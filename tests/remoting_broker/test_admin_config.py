"""Remoting codes that real 4.x/5.x Java tools and clients send, found missing by the
conformance suite (each was REQUEST_CODE_NOT_SUPPORTED): GET_TOPIC_CONFIG (351, mqadmin
topicStatus), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, updateSubGroup),
QUERY_TOPIC_CONSUME_BY_WHO (300, queryMsgById/ByOffset), INVOKE_BROKER_TO_RESET_OFFSET (222,
resetOffsetByTime), CHECK_CLIENT_CONFIG (46, an SQL92 push consumer's start),
LITE_PULL_MESSAGE (361, DefaultLitePullConsumer); and brokerStatus's ``runtime`` key."""

from __future__ import annotations

import json
import re

from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from tests.remoting_broker.conftest import call, connect


def test_topic_config_of_one_topic(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    created = call(
        c,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "tc", "readQueueNums": "3", "writeQueueNums": "3", "perm": "6"},
    )
    assert created.code == ResponseCode.SUCCESS
    got = call(c, RC.GET_TOPIC_CONFIG, {"topic": "tc"})
    assert got.code == ResponseCode.SUCCESS
    body = json.loads(got.body)
    assert (body["topicName"], body["readQueueNums"], body["writeQueueNums"], body["perm"]) == (
        "tc",
        3,
        3,
        6,
    )
    missing = call(c, RC.GET_TOPIC_CONFIG, {"topic": "nope"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "nope" in missing.remark


def test_topic_attributes_are_changed_as_mqadmin_sends_them(front: RemotingFrontEnd, clients):
    """``attributes`` (``mqadmin updateTopic -a``): ``+k=v`` sets, ``-k`` removes, what is
    not named is kept by an update; a malformed item is refused and changes nothing."""
    c = connect(front, clients)

    def update(attributes: str) -> int:
        fields = {"topic": "ta", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
        return call(c, RC.UPDATE_AND_CREATE_TOPIC, {**fields, "attributes": attributes}).code

    def attributes() -> dict[str, str]:
        return json.loads(call(c, RC.GET_TOPIC_CONFIG, {"topic": "ta"}).body)["attributes"]

    assert update("+dedup=false,+owner=billing") == ResponseCode.SUCCESS
    assert attributes() == {"dedup": "false", "owner": "billing"}
    assert front.ctx.broker.topics.dedup("ta") is False
    assert update("-dedup") == ResponseCode.SUCCESS
    assert attributes() == {"owner": "billing"} and front.ctx.broker.topics.dedup("ta")
    assert update("dedup=false") != ResponseCode.SUCCESS
    assert update("+dedup=maybe") != ResponseCode.SUCCESS
    assert attributes() == {"owner": "billing"}
    table = json.loads(call(c, RC.GET_ALL_TOPIC_CONFIG, {}).body)["topicConfigTable"]
    assert table["ta"]["attributes"] == {"owner": "billing"}


def test_update_sub_group_configures_the_group(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    config = {
        "groupName": "g-adm",
        "consumeEnable": True,
        "consumeBroadcastEnable": False,
        "consumeMessageOrderly": True,
        "retryMaxTimes": 3,
        "retryQueueNums": 1,
    }
    done = call(c, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())
    assert done.code == ResponseCode.SUCCESS
    group = front.ctx.broker.groups.get("g-adm")
    assert group is not None and group.fifo and not group.broadcast
    assert group.retry_policy.max_retries == 3 and not group.auto_created
    bad = call(c, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"consumeEnable": true}')
    assert bad.code == ResponseCode.SYSTEM_ERROR and "groupName" in bad.remark


def test_runtime_info_has_the_uptime_as_rocketmq_prints_it(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    info = json.loads(call(c, RC.GET_BROKER_RUNTIME_INFO).body)["table"]
    assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", info["runtime"])


def test_topic_consumed_by_lists_the_groups_with_offsets(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    call(
        c,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "tw", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"},
    )
    for group in ("g-b", "g-a"):
        fields = {"consumerGroup": group, "topic": "tw", "queueId": "0", "commitOffset": "0"}
        assert call(c, RC.UPDATE_CONSUMER_OFFSET, fields).code == ResponseCode.SUCCESS
    got = call(c, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "tw"})
    assert got.code == ResponseCode.SUCCESS
    assert json.loads(got.body) == {"groupList": ["g-a", "g-b"]}


def test_reset_offset_by_time_moves_the_group(front: RemotingFrontEnd, clients):
    c = connect(front, clients)
    call(
        c,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "tr", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"},
    )
    config = {"groupName": "g-reset"}
    call(c, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())
    fields = {"consumerGroup": "g-reset", "topic": "tr", "queueId": "0", "commitOffset": "0"}
    assert call(c, RC.UPDATE_CONSUMER_OFFSET, fields).code == ResponseCode.SUCCESS
    reset = {"topic": "tr", "group": "g-reset", "timestamp": "0", "isForce": "true"}
    got = call(c, RC.INVOKE_BROKER_TO_RESET_OFFSET, reset)
    assert got.code == ResponseCode.SUCCESS, got.remark
    assert b'"queueId":0' in got.body and b'"offsetTable"' in got.body
    missing = call(c, RC.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "group": "g-none"})
    assert missing.code == ResponseCode.SYSTEM_ERROR and "g-none" in missing.remark


def test_check_client_config_compiles_the_subscription(front: RemotingFrontEnd, clients):
    c = connect(front, clients)

    def check(kind: str, expression: str):
        sub = {"topic": "t", "subString": expression, "expressionType": kind}
        body = {"clientId": "c1", "group": "g", "subscriptionData": sub}
        return call(c, RC.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())

    assert check("SQL92", "a = 2").code == ResponseCode.SUCCESS
    assert check("TAG", "A || B").code == ResponseCode.SUCCESS
    bad = check("SQL92", "a = = 2")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and bad.remark


def test_lite_pull_is_served_as_a_pull(front: RemotingFrontEnd, clients):
    """A DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE (361), sysFlag bit 4."""
    from tests.remoting_broker.test_front_end import create_topic, decode_stored, send_v2

    c = connect(front, clients)
    create_topic(c, "tl", 1)
    send_v2(c, "tl", b"m0")
    fields = {
        "consumerGroup": "gl",
        "topic": "tl",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": str(1 << 4),
        "commitOffset": "-1",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    got = call(c, RC.LITE_PULL_MESSAGE, fields)
    assert got.code == ResponseCode.SUCCESS, got.remark
    assert [r["body"] for r in decode_stored(got.body)] == [b"m0"]
