"""``ChangeInvisibleDuration``: keep a delivery invisible for longer (or release it sooner).

The delivery named by ``receipt_handle`` becomes invisible for ``invisible_duration``
from now and the response carries a *new* receipt handle; the old one is stale from then
on (acking it answers INVALID_RECEIPT_HANDLE). A zero duration makes the message visible
again at once (the next receive gets it with its delivery attempt increased). The
PushConsumer calls this with its backoff delay when a listener fails. In a cluster, a
handle of another broker group is forwarded to it (its answer, or PROXY_TIMEOUT naming it).
"""

from __future__ import annotations

from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.errors import RocketMQError
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_duration
from broker_core.server.handlers.ack_message import owner_of, require_group_and_topic


def handle(ctx: ServerContext, request: Any, context: grpc.ServicerContext) -> Any:
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
    new_handle = ctx.broker.change_invisible_duration(
        group,
        topic,
        request.receipt_handle,
        ms_of_duration(request.invisible_duration),
        client_id=sessions.client_id_of(context, required=False),
        lite_topic=request.lite_topic,
    )
    return service_pb2.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=new_handle)
