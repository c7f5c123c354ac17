"""The receive family: ``ReceiveMessage`` (server streaming), the POP receive of
SimpleConsumer and PushConsumer.

Request → ``Consuming.receive(group, topic, max_count=batch_size, invisible_ms=…,
filter=…, timeout_ms=…)`` over every read queue of the topic (and the group's retry
topic). Like RocketMQ's proxy, the queue id in ``message_queue`` is not a restriction:
POP consumers share all queues of a broker, and a receive that named one queue would
long-poll on it while messages wait in the others.

The stream, in the order the official clients expect (the Java proxy's
``ReceiveMessageResponseStreamWriter``)::

    status OK, one ``message`` per delivery, ``delivery_timestamp``   when messages came
    status MESSAGE_NOT_FOUND, ``delivery_timestamp``                  after an empty poll
    status <error code>                                               a refused request

The clients treat MESSAGE_NOT_FOUND as "no message" (an empty list), not an error.

Broadcasting groups: the ``x-mq-client-id`` header names the client, whose own progress
the receive uses (every client gets every message); without it the request is a
BAD_REQUEST. Ack, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue use the
same header to find the client's delivery.

Timing: ``long_polling_timeout`` bounds the wait (default: as long as the gRPC deadline
allows); the answer always goes out ``common.ANSWER_MARGIN_MS`` before the deadline, so a
client never times out waiting for it, and a deadline too close for any wait gets a
single non-blocking look (``common.polling_budget_ms``).

Invisible time: ``invisible_duration`` when given; with ``auto_renew`` and no duration
(what the PushConsumer sends) :data:`AUTO_RENEW_INVISIBLE_MS`, RocketMQ's renew slice.
The broker does not renew deliveries in the background: a listener busy for longer than
that should call ChangeInvisibleDuration. Neither given is a BAD_REQUEST.

A client that gives up: the long poll checks every :data:`POLL_SLICE_MS` that its
client still waits and stops when it does not. Deliveries the client never got (it left
just as messages arrived, or the stream broke) are made visible again after
:data:`NACK_INVISIBLE_MS` instead of staying invisible for the whole invisible time; a
message may then be delivered twice, never lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.pop.model import PoppedMessage
from broker_core.errors import MessageNotFoundError, RocketMQError
from broker_core.message import validate_group_name, validate_topic_name
from broker_core.protocol.filters import MessageFilter
from broker_core.protocol.status import bad_request, ok, status_of
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.convert_out import ms_of_duration, now_timestamp, popped_to_pb
from broker_core.server.handlers.common import (
    message_filter,
    polling_budget_ms,
    requested_polling_ms,
)

log = logging.getLogger(__name__)

AUTO_RENEW_INVISIBLE_MS = 60_000
NACK_INVISIBLE_MS = 1_000
POLL_SLICE_MS = 1_000  # how often a long poll checks that its client is still there

Response = service_pb2.ReceiveMessageResponse


def _invisible_ms(request: service_pb2.ReceiveMessageRequest) -> int | None:
    """The invisible time the request asks for; None when it names none (a bad request)."""
    if request.HasField("invisible_duration"):
        return ms_of_duration(request.invisible_duration)
    return AUTO_RENEW_INVISIBLE_MS if request.auto_renew else None


def _too_long(invisible_ms: int, limit_ms: int) -> pb.Status:
    return pb.Status(
        code=pb.Code.ILLEGAL_INVISIBLE_TIME,
        message=f"invisible_duration {invisible_ms} ms is over the limit of {limit_ms} ms",
    )


def receive_message(
    ctx: ServerContext, request: service_pb2.ReceiveMessageRequest, context: grpc.ServicerContext
) -> Iterator[service_pb2.ReceiveMessageResponse]:
    """Stream the answer to one ReceiveMessageRequest (see the module docstring)."""
    group = validate_group_name(request.group.name)
    topic = validate_topic_name(request.message_queue.topic.name)
    invisible_ms = _invisible_ms(request)
    if invisible_ms is None:
        yield Response(status=bad_request("invisible_duration is required unless auto_renew"))
        return
    if invisible_ms > ctx.broker.pop.config.max_invisible_ms:  # as RocketMQ's proxy answers
        yield Response(status=_too_long(invisible_ms, ctx.broker.pop.config.max_invisible_ms))
        return
    if request.batch_size < 1:
        yield Response(status=bad_request(f"batch_size must be ≥ 1, got {request.batch_size}"))
        return
    flt = message_filter(request.filter_expression)
    requested = requested_polling_ms(request)
    client_id = sessions.client_id_of(context, required=False)  # broadcasting groups need it
    popped = _long_poll(
        ctx,
        context,
        (group, client_id),
        topic,
        request.batch_size,
        invisible_ms,
        flt,
        polling_budget_ms(context, requested),
    )
    if not popped:
        yield Response(status=status_of(MessageNotFoundError("no new message")))
        yield Response(delivery_timestamp=now_timestamp())
        return
    if not context.is_active():  # the client left during the long poll
        _nack(ctx, (group, client_id), popped)
        return
    yield from _stream(ctx, (group, client_id), popped, invisible_ms)


Consumer = tuple[str, str]  # (group, client id)


def _long_poll(
    ctx: ServerContext,
    context: grpc.ServicerContext,
    consumer: Consumer,
    topic: str,
    batch_size: int,
    invisible_ms: int,
    flt: MessageFilter | None,
    budget_ms: int,
) -> list[PoppedMessage]:
    """``Consuming.receive`` in slices of :data:`POLL_SLICE_MS`, so a client that gives up
    stops the poll within a slice instead of having messages popped for nobody."""
    deadline_ms = time.monotonic_ns() // 1_000_000 + budget_ms
    while True:
        remaining_ms = max(0, deadline_ms - time.monotonic_ns() // 1_000_000)
        popped = ctx.broker.consuming.receive(
            consumer[0],
            topic,
            max_count=batch_size,
            invisible_ms=invisible_ms,
            filter=flt,
            client_id=consumer[1],
            timeout_ms=min(remaining_ms, POLL_SLICE_MS),
        )
        if popped or remaining_ms <= POLL_SLICE_MS or not context.is_active():
            return popped


def _stream(
    ctx: ServerContext, consumer: Consumer, popped: list[PoppedMessage], invisible_ms: int
) -> Iterator[service_pb2.ReceiveMessageResponse]:
    """Status, messages, delivery timestamp; undelivered messages are nacked on a break."""
    sent = 0
    try:
        yield Response(status=ok())
        for item in popped:
            yield Response(message=popped_to_pb(item, invisible_ms))
            sent += 1
        yield Response(delivery_timestamp=now_timestamp())
    finally:
        if ctx.metrics is not None and sent:
            ctx.metrics.messages_out(
                popped[0].topic, consumer[0], sent, sum(len(p.message.body) for p in popped[:sent])
            )
        if sent < len(popped):
            _nack(ctx, consumer, popped[sent:])


def _nack(ctx: ServerContext, consumer: Consumer, popped: Sequence[PoppedMessage]) -> None:
    """Make deliveries the client did not get visible again soon (best effort)."""
    for item in popped:
        try:
            ctx.broker.consuming.change_invisible_duration(
                consumer[0],
                item.topic,
                item.receipt_handle,
                NACK_INVISIBLE_MS,
                client_id=consumer[1],
            )
        except RocketMQError as exc:  # it stays invisible until its own deadline
            log.info("could not release undelivered message %s: %s", item.message_id, exc)
