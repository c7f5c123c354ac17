"""The statistics queries ``mqadmin`` uses most: topicStatus, consumerProgress, queryMsgByKey.

=================================  =========================================================
GET_TOPIC_STATS_INFO (202)         topic -> ``TopicStatsTable{offsetTable: {mq: {minOffset,
                                   maxOffset, lastUpdateTimestamp}}}``
GET_CONSUME_STATS (208)            consumerGroup[, topic] -> ``ConsumeStats{offsetTable: {mq:
                                   {brokerOffset, consumerOffset, lastTimestamp}},
                                   consumeTps}``
GET_CONSUMER_CONNECTION_LIST       consumerGroup -> ``ConsumerConnection{connectionSet[{clientId,
(203)                              clientAddr, language, version}], subscriptionTable, ...}``
                                   of its remoting consumers; CONSUMER_NOT_ONLINE (206) if none
QUERY_MESSAGE (12)                 topic, key, maxNum, beginTimestamp, endTimestamp -> the
                                   messages as ``MessageDecoder`` records; QUERY_NOT_FOUND
                                   (22) when none
=================================  =========================================================

Both tables are maps keyed by a MessageQueue object, which Java's fastjson writes with the
object itself as the key (``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, not
standard JSON); that is what ``mqadmin`` reads, so that is what is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import LanguageCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_int, field_str
from broker_core.remoting_broker.msgcodec import encode_messages


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def fastjson_mq_map(broker_name: str, rows: Mapping[tuple[str, int], object]) -> str:
    """``{mq-object: value}`` as fastjson writes a map keyed by MessageQueue."""
    items = (
        f"{_dumps({'brokerName': broker_name, 'queueId': qid, 'topic': topic})}:{_dumps(value)}"
        for (topic, qid), value in sorted(rows.items())
    )
    return "{" + ",".join(items) + "}"


def handle_topic_stats(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    topic = field_str(req.ext_fields, "topic")
    rows: dict[tuple[str, int], dict[str, object]] = {
        (topic, qid): {"minOffset": low, "maxOffset": high, "lastUpdateTimestamp": 0}
        for qid, low, high in ctx.broker.topic_status(topic)
    }
    body = '{"offsetTable":' + fastjson_mq_map(ctx.broker_name, rows) + "}"
    return req.response(body=body.encode())


def handle_consume_stats(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    group = field_str(req.ext_fields, "consumerGroup")
    only = req.ext_fields.get("topic") or None
    rows: dict[tuple[str, int], dict[str, object]] = {
        (topic, qid): {"brokerOffset": high, "consumerOffset": offset, "lastTimestamp": 0}
        for topic, qid, high, offset, _lag in ctx.broker.consumer_groups.group_progress(group)
        if only is None or topic == only
    }
    body = '{"consumeTps":0.0,"offsetTable":' + fastjson_mq_map(ctx.broker_name, rows) + "}"
    return req.response(body=body.encode())


def handle_consumer_connections(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    group = field_str(req.ext_fields, "consumerGroup")
    sessions = ctx.sessions.consumers_of(group)
    if not sessions:
        return req.response(
            ResponseCode.CONSUMER_NOT_ONLINE,
            remark=f"no remoting consumer of group {group} is online",
        )
    connections = [
        {
            "clientId": s.client_id,
            "clientAddr": s.channel.peer,
            "language": _language_name(s.language),
            "version": s.version,
        }
        for s in sessions
    ]
    table = {
        topic: {
            "topic": topic,
            "subString": expr,
            "expressionType": kind,
            "tagsSet": [],
            "codeSet": [],
            "subVersion": 0,
            "classFilterMode": False,
        }
        for topic, (kind, expr) in ctx.sessions.subscriptions_of(group).items()
    }
    body = {
        "connectionSet": connections,
        "subscriptionTable": table,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
    }
    return req.response(body=_dumps(body).encode())


def _language_name(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


def handle_query_message(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    found = ctx.broker.query_by_key(
        field_str(fields, "topic"),
        field_str(fields, "key"),
        max_results=max(1, min(field_int(fields, "maxNum", 32), 1000)),
        begin_ms=field_int(fields, "beginTimestamp", 0),
        end_ms=field_int(fields, "endTimestamp", 2**62),
    )
    if not found:
        return req.response(ResponseCode.QUERY_NOT_FOUND, remark="no message with that key")
    ext = {
        "indexLastUpdateTimestamp": str(max(m.store_timestamp_ms for m in found)),
        "indexLastUpdatePhyoffset": str(max(m.physical_offset for m in found)),
    }
    return req.response(ext_fields=ext, body=encode_messages(found, ctx.host_port))
