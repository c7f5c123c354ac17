"""``AckMessage``: end POP deliveries, one status per (message id, receipt handle) entry.

Each entry is acked on its own; a stale handle (superseded by ChangeInvisibleDuration,
already acked, or revived after its invisible time) answers INVALID_RECEIPT_HANDLE, as
does one that does not decode — the official PushConsumer stops retrying an ack on that
code. The response status is the entries' common status, or MULTIPLE_RESULTS when they
differ (RocketMQ's ``AckMessageActivity``). The group must exist
(CONSUMER_GROUP_NOT_FOUND) and so must the topic (TOPIC_NOT_FOUND); the topic is the one
the client received the message under (a retry copy carries its original topic).

In a cluster, an entry whose handle names another broker group is forwarded to it
(``cluster/forward.py``) and its status is that broker's answer, or PROXY_TIMEOUT with a
message naming the broker when it cannot be reached: never silently lost.
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pop.receipt import decode_handle
from broker_core.errors import RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server import sessions
from broker_core.server.context import ServerContext


def require_group_and_topic(ctx: ServerContext, request: Any) -> tuple[str, str]:
    """``(group, topic)`` of a request on deliveries; both must exist already.

    Raises InvalidGroupError / InvalidTopicError for malformed names, GroupNotFoundError /
    TopicNotFoundError for unknown ones (a delivery cannot exist without both).
    """
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.topic.name)
    ctx.broker.groups.require(group)
    ctx.broker.topics.require(topic)
    return group, topic


def _ack_one(ctx: ServerContext, group: str, topic: str, entry: Any, client_id: str) -> Any:
    try:
        ctx.broker.ack(
            group, topic, entry.receipt_handle, client_id=client_id, lite_topic=entry.lite_topic
        )
        status = ok()
    except RocketMQError as exc:
        status = status_of(exc)
    return service_pb2.AckMessageResultEntry(
        message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
    )


def owner_of(ctx: ServerContext, receipt_handle: str) -> str | None:
    """The other broker group a handle belongs to, or None when it is ours (or does not
    decode, or this broker is not in a cluster: it is then answered here)."""
    if ctx.forwarder is None:
        return None
    try:
        name = decode_handle(receipt_handle).broker_name
    except RocketMQError:
        return None
    return None if name == ctx.broker_name else name


def _forward(
    ctx: ServerContext,
    broker_name: str,
    request: Any,
    entries: list[Any],
    context: grpc.ServicerContext,
) -> list[Any]:
    """The result entries of ``entries`` acked by broker group ``broker_name``."""
    assert ctx.forwarder is not None
    sub = service_pb2.AckMessageRequest(group=request.group, topic=request.topic, entries=entries)
    try:
        reply = ctx.forwarder.call(broker_name, "AckMessage", sub, context.invocation_metadata())
    except RocketMQError as exc:
        return [
            service_pb2.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=status_of(exc)
            )
            for e in entries
        ]
    if len(reply.entries) == len(entries):
        return list(reply.entries)
    return [
        service_pb2.AckMessageResultEntry(
            message_id=e.message_id, receipt_handle=e.receipt_handle, status=reply.status
        )
        for e in entries
    ]


def _results(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> list[Any]:
    """One result entry per request entry, in order; ours acked here, others forwarded."""
    owners = [owner_of(ctx, e.receipt_handle) for e in request.entries]
    results: list[Any] = [None] * len(owners)
    for name in sorted({o for o in owners if o is not None}):
        picked = [i for i, o in enumerate(owners) if o == name]
        answers = _forward(ctx, name, request, [request.entries[i] for i in picked], context)
        for i, answer in zip(picked, answers, strict=True):
            results[i] = answer
    local = [i for i, o in enumerate(owners) if o is None]
    if local:
        group, topic = require_group_and_topic(ctx, request)
        client_id = sessions.client_id_of(context, required=False)  # broadcasting needs it
        for i in local:
            results[i] = _ack_one(ctx, group, topic, request.entries[i], client_id)
    return results


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Ack every entry; see the module docstring for the statuses."""
    if not request.entries:
        require_group_and_topic(ctx, request)
        return service_pb2.AckMessageResponse(status=bad_request("no entries to ack"))
    results = _results(ctx, request, context)
    codes = {r.status.code for r in results}
    if len(codes) == 1:
        overall = results[0].status
    else:
        failed = sum(r.status.code != pb.Code.OK for r in results)
        overall = pb.Status(
            code=pb.Code.MULTIPLE_RESULTS,
            message=f"{failed} of {len(results)} acks failed; see entries",
        )
    return service_pb2.AckMessageResponse(status=overall, entries=results)
