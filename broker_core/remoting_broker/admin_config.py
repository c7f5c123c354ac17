"""One topic's or group's configuration, as mqadmin 5.x reads and writes it.

=======================================  ===================================================
GET_TOPIC_CONFIG (351)                   ``topic`` -> body: a TopicConfig JSON object
                                         (``topicName``, ``readQueueNums``,
                                         ``writeQueueNums``, ``perm``, ``order``, ...);
                                         TOPIC_NOT_EXIST (17) for an unknown topic. mqadmin
                                         5.x's ``topicStatus`` asks it first.
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP      body: a SubscriptionGroupConfig JSON object
(200)                                    (``groupName``, ``consumeEnable``,
                                         ``consumeBroadcastEnable``,
                                         ``consumeMessageOrderly``, ``retryMaxTimes``) ->
                                         ``Broker.configure_group`` (``updateSubGroup``)
INVOKE_BROKER_TO_RESET_OFFSET (222)      ``topic``, ``group``, ``timestamp`` (ms) ->
                                         ``ConsumerGroups.reset_offsets`` (mqadmin
                                         resetOffsetByTime); body ``{"offsetTable":
                                         {MessageQueue: offset}}``
QUERY_TOPIC_CONSUME_BY_WHO (300)         ``topic`` -> body ``{"groupList": [group, ...]}``:
                                         the groups with offsets on the topic (mqadmin
                                         queryMsgById/ByOffset ask it after printing)
=======================================  ===================================================
"""

from __future__ import annotations

import dataclasses
import json

from broker_core.broker.groups import GroupConfig
from broker_core.broker.retry import RetryPolicy
from broker_core.errors import InvalidArgumentError
from broker_core.namesrv.wire import loads
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.admin_stats import fastjson_mq_map
from broker_core.remoting_broker.context import RemotingContext, field_int, field_str


def handle_topic_config(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    name = field_str(req.ext_fields, "topic")
    topic = next((t for t in ctx.broker.topics.list() if t.name == name), None)
    if topic is None:
        remark = f"No topic in this broker. topic: {name}"
        return req.response(ResponseCode.TOPIC_NOT_EXIST, remark=remark)
    body = {
        "topicName": topic.name,
        "readQueueNums": topic.read_queue_nums,
        "writeQueueNums": topic.write_queue_nums,
        "perm": topic.perm,
        "order": topic.message_type == "FIFO",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "attributes": dict(topic.attributes),
    }
    return req.response(body=json.dumps(body).encode())


def handle_create_group(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    data = loads(req.body, "SubscriptionGroupConfig")
    if not isinstance(data, dict) or not isinstance(data.get("groupName"), str):
        raise InvalidArgumentError("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: body needs groupName")
    name = data["groupName"]
    old = ctx.broker.groups.get(name) or GroupConfig(name)
    retries = data.get("retryMaxTimes")
    policy = old.retry_policy
    if isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0:
        policy = RetryPolicy(retries, old.retry_policy.backoff)
    config = dataclasses.replace(
        old,
        retry_policy=policy,
        fifo=bool(data.get("consumeMessageOrderly", old.fifo)),
        broadcast=bool(data.get("consumeBroadcastEnable", old.broadcast)),
        consume_enable=bool(data.get("consumeEnable", old.consume_enable)),
        auto_created=False,
    )
    ctx.broker.configure_group(config)
    return req.response(ResponseCode.SUCCESS)


def handle_consumed_by(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    groups = ctx.broker.offsets.groups_of_topic(field_str(req.ext_fields, "topic"))
    return req.response(body=json.dumps({"groupList": groups}).encode())


def handle_reset_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    topic, group = field_str(fields, "topic"), field_str(fields, "group")
    offsets = ctx.broker.consumer_groups.reset_offsets(group, topic, field_int(fields, "timestamp"))
    rows = {(topic, qid): offset for qid, offset in offsets.items()}
    body = '{"offsetTable":' + fastjson_mq_map(ctx.broker_name, rows) + "}"
    return req.response(body=body.encode())
