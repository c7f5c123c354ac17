"""``apache.rocketmq.v2.MessagingService``: the RPC → handler table, one error wrapper.

Handlers live in ``broker_core.server.handlers``, one module per RPC family; each is
``f(ctx: ServerContext, request, context: grpc.ServicerContext)`` returning the
response (or, for streaming RPCs, an iterator of responses). The wrapper here turns any
exception into a response whose ``status`` carries the mapped code (``status.py``), so
a bad request never kills the server and never leaves a client without an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeAlias

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message as ProtoMessage
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.errors import RocketMQError
from broker_core.protocol.status import status_of
from broker_core.server.context import ServerContext
from broker_core.server.handlers import (
    clients,
    delivery,
    held,
    offsets,
    pull,
    receive,
    route,
    send,
    telemetry,
)

log = logging.getLogger(__name__)

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]

# (ctx, request, context) → response, or an iterator of responses for streaming RPCs; each
# handler names its generated request and response classes (handlers/__init__.py).
Handler: TypeAlias = Callable[
    [ServerContext, ProtoMessage, grpc.ServicerContext],
    ProtoMessage | Iterator[ProtoMessage],
]


HANDLERS: dict[str, Handler] = {
    "QueryRoute": route.query_route,
    "QueryAssignment": route.query_assignment,
    "SendMessage": send.send_message,
    "EndTransaction": held.end_transaction,
    "RecallMessage": held.recall_message,
    "ReceiveMessage": receive.receive_message,
    "AckMessage": delivery.ack_message,
    "ChangeInvisibleDuration": delivery.change_invisible_duration,
    "ForwardMessageToDeadLetterQueue": delivery.forward_to_dlq,
    "PullMessage": pull.pull_message,
    "UpdateOffset": offsets.update_offset,
    "GetOffset": offsets.get_offset,
    "QueryOffset": offsets.query_offset,
    "Heartbeat": clients.heartbeat,
    "NotifyClientTermination": clients.notify_client_termination,
    "SyncLiteSubscription": clients.sync_lite_subscription,
    "Telemetry": telemetry.telemetry,
}


def _response_class(method: str) -> type[ProtoMessage]:
    return message_factory.GetMessageClass(SERVICE.methods_by_name[method].output_type)


def _log_failure(method: str, exc: BaseException) -> None:
    if isinstance(exc, RocketMQError):
        log.info("%s refused: %s", method, exc)
    else:
        log.exception("%s failed", method)


def _unary(method: str, handler: Handler) -> Callable[..., ProtoMessage]:
    response = _response_class(method)

    def call(
        self: MessagingService, request: ProtoMessage, context: grpc.ServicerContext
    ) -> ProtoMessage:
        try:
            return handler(self.ctx, request, context)
        except Exception as exc:
            _log_failure(method, exc)
            return response(status=status_of(exc))

    return call


def _streaming(method: str, handler: Handler) -> Callable[..., Iterator[ProtoMessage]]:
    response = _response_class(method)

    def call(
        self: MessagingService, request: ProtoMessage, context: grpc.ServicerContext
    ) -> Iterator[ProtoMessage]:
        try:
            yield from handler(self.ctx, request, context)
        except Exception as exc:
            _log_failure(method, exc)
            yield response(status=status_of(exc))

    return call


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The servicer; its methods are generated from ``HANDLERS`` below."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx


for _method in SERVICE.methods:
    _wrap = _streaming if _method.server_streaming else _unary
    setattr(MessagingService, _method.name, _wrap(_method.name, HANDLERS[_method.name]))
