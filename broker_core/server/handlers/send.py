"""The send family: ``SendMessage`` (MessagingService) and ``SendBulk`` (our Bulk service).

**SendMessage** stores a request's messages (one or many) and says where each went.

Every message is converted and validated first (``convert_in``); any bad message fails
the whole request with its code (ILLEGAL_TOPIC, MESSAGE_BODY_TOO_LARGE,
ILLEGAL_MESSAGE_PROPERTY_KEY, MESSAGE_CORRUPTED for a wrong body digest, BAD_REQUEST for a
message type that conflicts with its fields, …) and nothing is stored. The valid batch
then goes to ``Sending.send`` in one call, which routes each message: FIFO ones to their
message group's queue, timed ones to the timer, transactional ones to the half topic.

The answer has one OK entry per message, in request order: the client's message id,
the transaction id (transactional messages), the queue offset (in the queue it went to
now — the timer's or the half topic's for held messages), and the recall handle of a
timed message.

Transactional messages are prepared under their topic as producer group (RocketMQ 5
producers have none; RocketMQ's proxy does the same), so the check-back goes to a live
producer of that topic. All transactional messages of one request must share a topic.

**SendBulk** (``rmq.bulk.v1.Bulk/SendBulk``): a batch of plain messages sent as columns
(see :mod:`broker_core.protocol.bulk_send` for the frames). Decoded and checked by
``convert_bulk``, then stored by ``Sending.send_batch`` — the path SendMessage's plain
batches take — so a bulk send and a SendMessage of the same messages store the same
bytes. No exception escapes: errors become the response status.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc
from rocketmq.grpc_protocol import service_pb2

from broker_core.clock import now_ms
from broker_core.errors import InvalidArgumentError, RocketMQError
from broker_core.message import PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_KEY, Message
from broker_core.protocol.bulk_send import decode_request, encode_response
from broker_core.protocol.status import ok, status_of
from broker_core.server import master_forward, sessions
from broker_core.server.context import ServerContext
from broker_core.server.convert_bulk import to_column_batch
from broker_core.server.convert_columns import to_columns
from broker_core.server.convert_in import Limits, peer_address, to_messages
from broker_core.server.json_args import status_json

log = logging.getLogger(__name__)

# Below this many messages the fast lane's numpy set-up costs more than it saves.
FAST_LANE_MIN_MESSAGES = 32


def transaction_group(messages: Sequence[Message]) -> str | None:
    """The producer group of the request's transactional messages (their topic), or None."""
    topics = {m.topic for m in messages if m.properties.get(PROPERTY_TRANSACTION_PREPARED)}
    if len(topics) > 1:
        raise InvalidArgumentError(
            f"transactional messages of one request must share a topic, got {sorted(topics)}"
        )
    return topics.pop() if topics else None


def message_limits(ctx: ServerContext) -> Limits:
    """The store's limits on one message, which every send checks before storing."""
    config = ctx.broker.store_config
    return Limits(config.max_body_bytes, config.max_properties_bytes)


def send_message(
    ctx: ServerContext, request: service_pb2.SendMessageRequest, context: grpc.ServicerContext
) -> service_pb2.SendMessageResponse:
    """Validate every message, send them in one batch, answer one entry per message."""
    if not request.messages:
        raise InvalidArgumentError("SendMessage carries no message")
    if master_forward.should_forward(ctx):
        answer = master_forward.forward_send(ctx, request, context)
        if answer is not None:  # None: this broker was elected master meanwhile
            return answer
    limits = message_limits(ctx)
    peer, now = peer_address(context.peer()), now_ms()
    batch = None
    if len(request.messages) >= FAST_LANE_MIN_MESSAGES:
        batch = to_columns(request.messages, limits=limits, peer=peer, now_ms=now)
    if batch is not None:  # plain messages: the fast lane
        sent = ctx.broker.sending.send_batch(batch)
        if ctx.metrics is not None:
            ctx.metrics.messages_in(batch.topic, len(batch), batch.body_bytes())
        return _answer([keys[0] for keys in batch.index_keys], sent.queue_offsets.tolist())
    messages = to_messages(request.messages, limits=limits, peer=peer, now_ms=now)
    ids = [m.properties[PROPERTY_UNIQ_KEY] for m in messages]
    group = transaction_group(messages)
    results = ctx.broker.sending.send(messages, producer_group=group)
    if ctx.metrics is not None:
        for m in messages:
            ctx.metrics.messages_in(m.topic, 1, len(m.body))
    if group is not None:
        sessions.note_publishing(ctx, sessions.client_id_of(context, required=False), group)
    return _answer(
        ids,
        [r.queue_offset for r in results],
        [r.transaction_id for r in results],
        [r.recall_handle for r in results],
    )


def _answer(
    ids: list[str],
    offsets: list[int],
    transaction_ids: Sequence[str] = (),
    recall_handles: Sequence[str] = (),
) -> service_pb2.SendMessageResponse:
    """One OK entry per message, in request order."""
    status = ok()
    response = service_pb2.SendMessageResponse(status=status)
    add = response.entries.add  # one status object copied into each entry: 3x cheaper
    if not transaction_ids and not recall_handles:
        for message_id, offset in zip(ids, offsets, strict=True):
            add(status=status, message_id=message_id, offset=offset)
        return response
    for message_id, offset, tx_id, handle in zip(
        ids, offsets, transaction_ids, recall_handles, strict=True
    ):
        add(
            status=status,
            message_id=message_id,
            transaction_id=tx_id,
            offset=offset,
            recall_handle=handle,
        )
    return response


def send_bulk(ctx: ServerContext, request: bytes, context: grpc.ServicerContext) -> bytes:
    """Store one SendBulk batch whole, or refuse it whole; answer its queue offsets."""
    try:
        batch = to_column_batch(
            decode_request(request),
            limits=message_limits(ctx),
            peer=peer_address(context.peer()),
            now_ms=now_ms(),
        )
        sent = ctx.broker.sending.send_batch(batch)
        return encode_response(status_json(ok()), sent.queue_offsets)
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("SendBulk refused: %s", exc)
        else:
            log.exception("SendBulk failed")
        return encode_response(status_json(status_of(exc)), [])
