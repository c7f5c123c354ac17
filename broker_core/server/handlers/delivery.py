"""The delivery family: RPCs on one POP delivery, named by its receipt handle.

**AckMessage** ends deliveries, one status per (message id, receipt handle) entry. Each
entry is acked on its own; a stale handle (superseded by ChangeInvisibleDuration, already
acked, or revived after its invisible time) answers INVALID_RECEIPT_HANDLE, as does one
that does not decode — the official PushConsumer stops retrying an ack on that code. The
response status is the entries' common status, or MULTIPLE_RESULTS when they differ
(RocketMQ's ``AckMessageActivity``).

**ChangeInvisibleDuration** keeps a delivery invisible for longer (or releases it
sooner): it becomes invisible for ``invisible_duration`` from now and the response
carries a *new* receipt handle; the old one is stale from then on. A zero duration makes
the message visible again at once (the next receive gets it with its delivery attempt
increased). The PushConsumer calls this with its backoff delay when a listener fails.

**ForwardMessageToDeadLetterQueue**: the client gave up on a delivery. The message is
copied to ``%DLQ%{group}`` (created on first use) and its delivery ends, as if acked; the
handle is stale afterwards. The FIFO PushConsumer calls this once a message has failed
its last allowed attempt. ``delivery_attempt`` / ``max_delivery_attempts`` in the request
are informational: the client has already decided.

All three need an existing group (CONSUMER_GROUP_NOT_FOUND) and topic (TOPIC_NOT_FOUND);
the topic is the one the client received the message under (a retry copy carries its
original topic). In a cluster, a handle that names another broker group is forwarded to
it (``cluster/forward.py``; Ack and ChangeInvisibleDuration) and answered with that
broker's status, or PROXY_TIMEOUT with a message naming the broker when it cannot be
reached: never silently lost.
"""

from __future__ import annotations

from typing import Protocol

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pop.receipt import decode_handle
from broker_core.errors import RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_duration


class OnDelivery(Protocol):
    """What the requests of this family share: the group and the topic they name."""

    @property
    def group(self) -> pb.Resource: ...

    @property
    def topic(self) -> pb.Resource: ...


def require_group_and_topic(ctx: ServerContext, request: OnDelivery) -> tuple[str, str]:
    """``(group, topic)`` of a request on deliveries; both must exist already.

    Raises InvalidGroupError / InvalidTopicError for malformed names, GroupNotFoundError /
    TopicNotFoundError for unknown ones (a delivery cannot exist without both).
    """
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.topic.name)
    ctx.broker.groups.require(group)
    ctx.broker.topics.require(topic)
    return group, topic


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


# ---- AckMessage ---------------------------------------------------------------------------


def _ack_one(
    ctx: ServerContext, group: str, topic: str, entry: service_pb2.AckMessageEntry, client_id: str
) -> service_pb2.AckMessageResultEntry:
    try:
        ctx.broker.consuming.ack(
            group, topic, entry.receipt_handle, client_id=client_id, lite_topic=entry.lite_topic
        )
        status = ok()
    except RocketMQError as exc:
        status = status_of(exc)
    return service_pb2.AckMessageResultEntry(
        message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
    )


def _forward(
    ctx: ServerContext,
    broker_name: str,
    request: service_pb2.AckMessageRequest,
    entries: list[service_pb2.AckMessageEntry],
    context: grpc.ServicerContext,
) -> list[service_pb2.AckMessageResultEntry]:
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


def _results(
    ctx: ServerContext, request: service_pb2.AckMessageRequest, context: grpc.ServicerContext
) -> list[service_pb2.AckMessageResultEntry]:
    """One result entry per request entry, in order; ours acked here, others forwarded."""
    owners = [owner_of(ctx, e.receipt_handle) for e in request.entries]
    results: list[service_pb2.AckMessageResultEntry | None] = [None] * len(owners)
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
    return [r for r in results if r is not None]  # every index was filled above


def ack_message(
    ctx: ServerContext, request: service_pb2.AckMessageRequest, context: grpc.ServicerContext
) -> service_pb2.AckMessageResponse:
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


# ---- ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue --------------------------


def change_invisible_duration(
    ctx: ServerContext,
    request: service_pb2.ChangeInvisibleDurationRequest,
    context: grpc.ServicerContext,
) -> service_pb2.ChangeInvisibleDurationResponse:
    """Move the delivery's deadline; answer with the new handle."""
    owner = owner_of(ctx, request.receipt_handle)
    if owner is not None and ctx.forwarder is not None:
        try:
            return ctx.forwarder.call(
                owner, "ChangeInvisibleDuration", request, context.invocation_metadata()
            )
        except RocketMQError as exc:
            return service_pb2.ChangeInvisibleDurationResponse(status=status_of(exc))
    group, topic = require_group_and_topic(ctx, request)
    if not request.HasField("invisible_duration"):
        return service_pb2.ChangeInvisibleDurationResponse(
            status=bad_request("invisible_duration is required")
        )
    new_handle = ctx.broker.consuming.change_invisible_duration(
        group,
        topic,
        request.receipt_handle,
        ms_of_duration(request.invisible_duration),
        client_id=sessions.client_id_of(context, required=False),
        lite_topic=request.lite_topic,
    )
    return service_pb2.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=new_handle)


def forward_to_dlq(
    ctx: ServerContext,
    request: service_pb2.ForwardMessageToDeadLetterQueueRequest,
    context: grpc.ServicerContext,
) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
    """Dead-letter the delivery; OK, or the mapped error (stale handle, unknown group…)."""
    group, topic = require_group_and_topic(ctx, request)
    ctx.broker.consuming.forward_to_dead_letter(
        group,
        topic,
        request.receipt_handle,
        client_id=sessions.client_id_of(context, required=False),
        lite_topic=request.lite_topic,
    )
    return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=ok())
