"""``AckMessage``: end POP deliveries, one status per (message id, receipt handle) entry.

Each entry is acked on its own; a stale handle (superseded by ChangeInvisibleDuration,
already acked, or revived after its invisible time) answers INVALID_RECEIPT_HANDLE, as
does one that does not decode — the official PushConsumer stops retrying an ack on that
code. The response status is the entries' common status, or MULTIPLE_RESULTS when they
differ (RocketMQ's ``AckMessageActivity``). The group must exist
(CONSUMER_GROUP_NOT_FOUND) and so must the topic (TOPIC_NOT_FOUND); the topic is the one
the client received the message under (a retry copy carries its original topic).
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.status import bad_request, ok, status_of


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
        ctx.broker.ack(group, topic, entry.receipt_handle, client_id=client_id,
                       lite_topic=entry.lite_topic)  # fmt: skip
        status = ok()
    except RocketMQError as exc:
        status = status_of(exc)
    return service_pb2.AckMessageResultEntry(message_id=entry.message_id,
                                             receipt_handle=entry.receipt_handle,
                                             status=status)  # fmt: skip


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
    """Ack every entry; see the module docstring for the statuses."""
    group, topic = require_group_and_topic(ctx, request)
    if not request.entries:
        return service_pb2.AckMessageResponse(status=bad_request("no entries to ack"))
    client_id = sessions.client_id_of(context, required=False)  # broadcasting groups need it
    results = [_ack_one(ctx, group, topic, entry, client_id) for entry in request.entries]
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
