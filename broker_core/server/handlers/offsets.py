"""The offset family: ``UpdateOffset``, ``GetOffset`` and ``QueryOffset``, consumer and
queue offsets.

- UpdateOffset commits ``offset`` as the group's position in one queue (everything
  below it is consumed). Offsets are logical queue offsets, ≥ 0 (ILLEGAL_OFFSET
  otherwise); a commit is kept in memory and persisted with the others periodically
  and at shutdown.
- GetOffset answers the group's committed offset in the queue; a group that never
  committed there gets where it would start (its consume-from-where: first offset,
  last offset or a timestamp).
- QueryOffset answers a queue's bounds, no group involved: BEGINNING → the minimum
  offset, END → the maximum (the offset the next message will get), TIMESTAMP → the
  first offset stored at or after ``timestamp`` (END when none is).

Every RPC names an existing topic (TOPIC_NOT_FOUND otherwise) and one of its read
queues (BAD_REQUEST otherwise).
"""

from __future__ import annotations

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import InvalidArgumentError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_timestamp


def read_queue(ctx: ServerContext, message_queue: pb.MessageQueue) -> tuple[str, int]:
    """``(topic, queue_id)`` of a protobuf MessageQueue that names a readable queue.

    Raises InvalidTopicError, TopicNotFoundError, PermissionDeniedError, or
    InvalidArgumentError for a queue id the topic does not have.
    """
    topic = validate_topic_name(message_queue.topic.name)
    config = ctx.broker.topics.for_read(topic)
    queue_id = message_queue.id
    if not 0 <= queue_id < config.read_queue_nums:
        raise InvalidArgumentError(
            f"queue {queue_id} of topic {topic} does not exist "
            f"(it has {config.read_queue_nums} read queues)"
        )
    return topic, queue_id


def update_offset(
    ctx: ServerContext, request: service_pb2.UpdateOffsetRequest, context: grpc.ServicerContext
) -> service_pb2.UpdateOffsetResponse:
    """Commit the group's offset in one queue."""
    group = validate_group_name(request.group.name)
    topic, queue_id = read_queue(ctx, request.message_queue)
    ctx.broker.consumer_groups.commit_offset(group, topic, queue_id, request.offset)
    return service_pb2.UpdateOffsetResponse(status=ok())


def get_offset(
    ctx: ServerContext, request: service_pb2.GetOffsetRequest, context: grpc.ServicerContext
) -> service_pb2.GetOffsetResponse:
    """The group's committed offset in one queue (or where the group starts)."""
    group = validate_group_name(request.group.name)
    topic, queue_id = read_queue(ctx, request.message_queue)
    offset = ctx.broker.consumer_groups.consumer_offset(group, topic, queue_id)
    return service_pb2.GetOffsetResponse(status=ok(), offset=offset)


def query_offset(
    ctx: ServerContext, request: service_pb2.QueryOffsetRequest, context: grpc.ServicerContext
) -> service_pb2.QueryOffsetResponse:
    """A queue's minimum, maximum, or first offset at a time."""
    topic, queue_id = read_queue(ctx, request.message_queue)
    policy = request.query_offset_policy
    if policy == pb.QueryOffsetPolicy.BEGINNING:
        offset = ctx.broker.consumer_groups.queue_bounds(topic, queue_id)[0]
    elif policy == pb.QueryOffsetPolicy.END:
        offset = ctx.broker.consumer_groups.queue_bounds(topic, queue_id)[1]
    elif policy == pb.QueryOffsetPolicy.TIMESTAMP:
        if not request.HasField("timestamp"):
            return service_pb2.QueryOffsetResponse(
                status=bad_request("query_offset_policy TIMESTAMP needs a timestamp")
            )
        offset = ctx.broker.consumer_groups.offset_at(
            topic, queue_id, ms_of_timestamp(request.timestamp)
        )
    else:
        return service_pb2.QueryOffsetResponse(
            status=bad_request(f"unknown query_offset_policy {policy}")
        )
    return service_pb2.QueryOffsetResponse(status=ok(), offset=offset)
