"""Client and consumer-offset requests of 4.x clients.

=================================  =========================================================
HEART_BEAT (34)                    body ``HeartbeatData{clientID, producerDataSet[{groupName}],
                                   consumerDataSet[{groupName, messageModel,
                                   subscriptionDataSet[{topic, subString, expressionType}]}]}``;
                                   registers the client with the broker's ClientRegistry
                                   (shared with gRPC clients), creates ``%RETRY%group``,
                                   remembers subscriptions for pulls
UNREGISTER_CLIENT (35)             clientID, producerGroup, consumerGroup
GET_CONSUMER_LIST_BY_GROUP (38)    body ``{"consumerIdList": [...]}``; SYSTEM_ERROR if none
QUERY_CONSUMER_OFFSET (14)         ``offset``; a group that never committed reads 0 while the
                                   queue's first message is in memory, else QUERY_NOT_FOUND
                                   (22) and the client applies its consume-from, as Java
UPDATE_CONSUMER_OFFSET (15)        consumerGroup, topic, queueId, commitOffset
GET_MAX_OFFSET (30) / MIN (31)     topic, queueId -> ``offset``
SEARCH_OFFSET_BY_TIMESTAMP (29)    topic, queueId, timestamp -> ``offset``
LOCK_BATCH_MQ (41)                 body ``{consumerGroup, clientId, mqSet[...]}`` ->
                                   ``{"lockOKMQSet": [...]}``
UNLOCK_BATCH_MQ (42)               same body -> SUCCESS
CHECK_CLIENT_CONFIG (46)           body ``{clientId, group, subscriptionData{topic, subString,
                                   expressionType}}`` -> SUCCESS, or
                                   SUBSCRIPTION_PARSE_FAILED (23) for an expression that
                                   does not compile (a 4.x consumer with an SQL92 selector
                                   asks this at start)
=================================  =========================================================
"""

from __future__ import annotations

import json
from typing import Any

from broker_core.broker.rebalance import MessageQueue
from broker_core.errors import FilterSyntaxError, InvalidArgumentError
from broker_core.namesrv.wire import loads
from broker_core.protocol.filters import MessageFilter
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_int, field_str


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key) or []
    if not isinstance(value, list):
        raise InvalidArgumentError(f"heartbeat: {key} is not a list")
    return [v for v in value if isinstance(v, dict)]


def handle_heartbeat(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    data = loads(req.body, "heartbeat")
    if not isinstance(data, dict) or not isinstance(data.get("clientID"), str):
        raise InvalidArgumentError("heartbeat: body needs a clientID")
    client_id = data["clientID"]
    session = ctx.sessions.touch(client_id, channel)
    session.language, session.version = req.language, req.version
    broker = ctx.broker
    for producer in _list(data, "producerDataSet"):
        group = str(producer.get("groupName") or "")
        if group and group != "CLIENT_INNER_PRODUCER":
            session.producer_groups.add(group)
            broker.consumer_groups.heartbeat(group, client_id, topics=(), kind="producer")
    for consumer in _list(data, "consumerDataSet"):
        group = str(consumer.get("groupName") or "")
        if not group:
            continue
        topics = []
        for sub in _list(consumer, "subscriptionDataSet"):
            topic = str(sub.get("topic") or "")
            if topic:
                topics.append(topic)
                ctx.sessions.subscribe(
                    group,
                    topic,
                    str(sub.get("expressionType") or "TAG"),
                    str(sub.get("subString") or "*"),
                )
        if consumer.get("messageModel", "CLUSTERING") == "CLUSTERING":
            broker.topics.ensure_retry_topic(group)
        session.consumer_groups.add(group)
        broker.consumer_groups.heartbeat(group, client_id, topics=topics, kind="consumer")
    return req.response(ResponseCode.SUCCESS)


def handle_unregister(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    client_id = field_str(fields, "clientID")
    session = ctx.sessions.touch(client_id, channel)
    for key, groups in (
        ("producerGroup", session.producer_groups),
        ("consumerGroup", session.consumer_groups),
    ):
        group = fields.get(key)
        if group:
            groups.discard(group)
            ctx.broker.clients.unregister(group, client_id)
    return req.response(ResponseCode.SUCCESS)


def handle_consumer_list(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    group = field_str(req.ext_fields, "consumerGroup")
    ids = ctx.broker.clients.consumers(group)
    if not ids:
        return req.response(ResponseCode.SYSTEM_ERROR, remark=f"no consumer for group {group}")
    return req.response(body=_json({"consumerIdList": ids}))


def _queue(fields: dict[str, str]) -> tuple[str, int]:
    return field_str(fields, "topic"), field_int(fields, "queueId")


def handle_query_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    group = field_str(req.ext_fields, "consumerGroup")
    topic, queue_id = _queue(req.ext_fields)
    offset = ctx.broker.consumer_groups.committed_offset(group, topic, queue_id)
    if offset is None:
        if not ctx.broker.consumer_groups.starts_in_memory(topic, queue_id):
            return req.response(
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"group {group} has no offset in {topic}:{queue_id}",
            )
        offset = 0
    return req.response(ext_fields={"offset": str(offset)})


def handle_update_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    fields = req.ext_fields
    topic, queue_id = _queue(fields)
    ctx.broker.consumer_groups.commit_offset(
        field_str(fields, "consumerGroup"), topic, queue_id, field_int(fields, "commitOffset")
    )
    return req.response(ResponseCode.SUCCESS)


def handle_max_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    topic, queue_id = _queue(req.ext_fields)
    return req.response(
        ext_fields={"offset": str(ctx.broker.consumer_groups.queue_bounds(topic, queue_id)[1])}
    )


def handle_min_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    topic, queue_id = _queue(req.ext_fields)
    return req.response(
        ext_fields={"offset": str(ctx.broker.consumer_groups.queue_bounds(topic, queue_id)[0])}
    )


def handle_search_offset(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    topic, queue_id = _queue(req.ext_fields)
    offset = ctx.broker.consumer_groups.offset_at(
        topic, queue_id, field_int(req.ext_fields, "timestamp")
    )
    return req.response(ext_fields={"offset": str(offset)})


def _lock_body(req: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
    data = loads(req.body, "lock batch")
    if not isinstance(data, dict):
        raise InvalidArgumentError("lock batch: body is not an object")
    try:
        queues = [
            MessageQueue(str(q["topic"]), str(q.get("brokerName")), int(q["queueId"]))
            for q in _list(data, "mqSet")
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"lock batch: bad mqSet entry: {exc!r}") from None
    return str(data.get("consumerGroup") or ""), str(data.get("clientId") or ""), queues


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def handle_lock(ctx: RemotingContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group, client_id, queues = _lock_body(req)
    locked = ctx.broker.consumer_groups.lock_queues(group, client_id, queues)
    return req.response(body=_json({"lockOKMQSet": [_mq_json(mq) for mq in sorted(locked)]}))


def handle_unlock(ctx: RemotingContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    group, client_id, queues = _lock_body(req)
    ctx.broker.consumer_groups.unlock_queues(group, client_id, queues)
    return req.response(ResponseCode.SUCCESS)


def handle_check_client(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand:
    body = loads(req.body, "CheckClientRequestBody")
    sub = body.get("subscriptionData") if isinstance(body, dict) else None
    if not isinstance(sub, dict):
        raise InvalidArgumentError("CHECK_CLIENT_CONFIG: body needs subscriptionData")
    kind, expression = sub.get("expressionType"), sub.get("subString")
    try:
        MessageFilter(str(kind) if kind else None, str(expression or ""))
    except FilterSyntaxError as exc:
        return req.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))
    return req.response(ResponseCode.SUCCESS)
