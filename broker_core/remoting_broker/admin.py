"""Administration requests of 4.x tools (``mqadmin``) and clients.

=================================  =========================================================
UPDATE_AND_CREATE_TOPIC (17)       topic, readQueueNums, writeQueueNums, perm, order,
                                   attributes (``+k=v,-k``: changes the topic's) ->
                                   ``Broker.update_topic`` (re-registers with NameServers)
GET_ALL_TOPIC_CONFIG (21)          body ``{"topicConfigTable": {name: {...}}, "dataVersion"}``
GET_BROKER_RUNTIME_INFO (28)       body ``{"table": {key: value}}`` (a KVTable; ``runtime``
                                   is the uptime as RocketMQ prints it)
VIEW_MESSAGE_BY_ID (33)            offset (commitlog) -> the message as one pull record
=================================  =========================================================
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from broker_core.broker.topics import TopicConfig
from broker_core.errors import InvalidArgumentError
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_bool, field_int, field_str
from broker_core.remoting_broker.msgcodec import encode_message

_STARTED_MS = int(time.time() * 1000)


def handle_create_topic(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    name = field_str(fields, "topic")
    write = field_int(fields, "writeQueueNums", 8)
    kind = "FIFO" if field_bool(fields, "order") else "MIXED"
    old = ctx.broker.topics.get(name)
    config = TopicConfig(
        name,
        field_int(fields, "readQueueNums", write),
        write,
        field_int(fields, "perm", 6),
        message_type=kind,
        attributes=with_attributes(old.attributes if old else {}, fields.get("attributes", "")),
    )
    ctx.broker.update_topic(config)
    return req.response(ResponseCode.SUCCESS)


def with_attributes(old: Mapping[str, str], change: str) -> dict[str, str]:
    """``old`` changed as an ``attributes`` field says (RocketMQ's form, as ``mqadmin
    updateTopic -a`` sends it: ``+key=value`` sets, ``-key`` removes, comma separated)."""
    attributes = dict(old)
    for item in filter(None, change.split(",")):
        key, sep, value = item[1:].partition("=")
        if item[0] == "+" and key and sep:
            attributes[key] = value
        elif item[0] == "-" and key and not sep:
            attributes.pop(key, None)
        else:
            raise InvalidArgumentError(
                f"attributes: {item!r} is neither +key=value nor -key (comma separated)"
            )
    return attributes


def handle_all_topics(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    table = {
        t.name: {
            "topicName": t.name,
            "readQueueNums": t.read_queue_nums,
            "writeQueueNums": t.write_queue_nums,
            "perm": t.perm,
            "order": t.message_type == "FIFO",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "attributes": dict(t.attributes),
        }
        for t in ctx.broker.topics.list()
    }
    body = {
        "topicConfigTable": table,
        "dataVersion": {"timestamp": _STARTED_MS, "counter": len(table)},
    }
    return req.response(body=json.dumps(body).encode())


def handle_runtime_info(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    broker = ctx.broker
    table = {
        "brokerVersionDesc": "V4_9_4 (rocketmq-style python broker)",
        "brokerVersion": "401",
        "bootTimestamp": str(_STARTED_MS),
        "runtime": runtime_text(int(time.time() * 1000) - _STARTED_MS),
        "brokerName": ctx.broker_name,
        "remotingAddr": ctx.address,
        "topicCount": str(len(broker.topics.list())),
        "parkedPulls": str(broker.long_polling.parked_count),
        "msgPutTotalTodayNow": "0",
        "msgGetTotalTodayNow": "0",
    }
    table.update({f"service.{k}": v for k, v in broker.service_health().items()})
    return req.response(body=json.dumps({"table": table}).encode())


def runtime_text(up_ms: int) -> str:
    """Uptime as RocketMQ's brokerStatus prints it.

    >>> runtime_text(((2 * 24 + 3) * 60 + 4) * 60_000 + 5_000)
    '[ 2 days, 3 hours, 4 minutes, 5 seconds ]'
    """
    seconds = max(up_ms, 0) // 1000
    days, hours = seconds // 86_400, seconds // 3600 % 24
    return f"[ {days} days, {hours} hours, {seconds // 60 % 60} minutes, {seconds % 60} seconds ]"


def handle_view_message(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    msg = ctx.broker.message_at(field_int(req.ext_fields, "offset"))
    return req.response(body=encode_message(msg, ctx.host_port))
