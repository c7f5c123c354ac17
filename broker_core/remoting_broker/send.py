"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), END_TRANSACTION (37).

Request header (``SendMessageRequestHeader``; V2 uses the one-letter keys in brackets):
producerGroup (a), topic (b), defaultTopic (c), defaultTopicQueueNums (d), queueId (e),
sysFlag (f), bornTimestamp (g), flag (h), properties (i, ``k\\x01v\\x02``), reconsumeTimes
(j), unitMode (k), maxReconsumeTimes (l), batch (m). The body is the message body, or for
a batch the ``MessageDecoder.encodeMessages`` records (:mod:`.msgcodec`).

Everything goes through ``Sending.send``: the ``DELAY`` property (levels 1-18) is held by the
schedule service, a prepared transaction (sysFlag bit 2 or ``TRAN_MSG=true``) becomes a half
message. A zlib-compressed body (sysFlag bit 0) is stored inflated, so gRPC consumers read
it plain. Answer: SUCCESS with ``msgId`` (the UNIQ_KEY; comma-joined for a batch),
``queueId``, ``queueOffset`` and ``transactionId``; MESSAGE_ILLEGAL (13) with the reason
for a bad message. For a half message ``msgId`` is RocketMQ's offset message id of the
half record instead (as RocketMQ answers every send): the Java client keeps it as
``offsetMsgId`` and decodes END_TRANSACTION's ``commitLogOffset`` from it, which the ACL
checks (``access.py``); the UNIQ_KEY is the client's own (and ``transactionId``).
"""

from __future__ import annotations

from broker_core.broker.sending import SendResult
from broker_core.clock import now_ms
from broker_core.errors import InvalidArgumentError
from broker_core.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    offset_message_id,
)
from broker_core.protocol.property_codec import decode_text
from broker_core.remoting.channel import Channel
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext, field_bool, field_int, field_str
from broker_core.remoting_broker.msgcodec import (
    SYSFLAG_TRANSACTION_PREPARED,
    decode_batch,
    uncompress_body,
)
from broker_core.remoting_broker.send_columns import plain_columns

V2_KEYS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
TRANSACTION_COMMIT = 8
TRANSACTION_ROLLBACK = 12


def header_of(req: RemotingCommand) -> dict[str, str]:
    """The send header with long names, whichever version the request used."""
    if req.code in (310, 320) and "b" in req.ext_fields:
        return {V2_KEYS.get(k, k): v for k, v in req.ext_fields.items()}
    return req.ext_fields


def _peer_host(channel: Channel) -> tuple[str, int]:
    host, _, port = channel.peer.rpartition(":")
    return host, int(port) if port.isdigit() else 0


def _message(
    fields: dict[str, str], channel: Channel, body: bytes, flag: int, props: dict[str, str]
) -> Message:
    sys_flag = field_int(fields, "sysFlag", 0)
    body, sys_flag = uncompress_body(body, sys_flag)
    if sys_flag & SYSFLAG_TRANSACTION_PREPARED:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        props.setdefault(PROPERTY_PRODUCER_GROUP, field_str(fields, "producerGroup", ""))
    return Message(
        topic=field_str(fields, "topic"),
        body=body,
        queue_id=field_int(fields, "queueId", -1),
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp_ms=field_int(fields, "bornTimestamp", 0),
        born_host=_peer_host(channel),
        reconsume_times=field_int(fields, "reconsumeTimes", 0),
    )


def _answered_id(ctx: RemotingContext, result: SendResult) -> str:
    """The ``msgId`` answered for one message: the offset id of a half record (an IPv4
    listener's; else the UNIQ_KEY), the UNIQ_KEY of anything else."""
    if result.half_offset < 0:
        return result.message_id
    try:
        return offset_message_id(ctx.host_port, result.half_offset)
    except OSError:  # not an IPv4 listener: RocketMQ's id has no room for the host
        return result.message_id


def _answer(
    ctx: RemotingContext, req: RemotingCommand, results: list[SendResult]
) -> RemotingCommand:
    first = results[0]
    ext = {
        "msgId": ",".join(_answered_id(ctx, r) for r in results),
        "queueId": str(first.queue_id),
        "queueOffset": str(first.queue_offset),
    }
    if first.transaction_id:
        ext["transactionId"] = first.transaction_id
    return req.response(ResponseCode.SUCCESS, ext_fields=ext)


def handle_send(ctx: RemotingContext, channel: Channel, req: RemotingCommand) -> RemotingCommand:
    """SEND_MESSAGE / SEND_MESSAGE_V2, and SEND_BATCH_MESSAGE when ``batch`` is true."""
    fields = header_of(req)
    try:
        if req.code == 320 or field_bool(fields, "batch"):
            records = decode_batch(req.body)
            if not records:
                raise InvalidArgumentError("a batch needs at least one message")
            fast = _send_plain_batch(ctx, channel, req, fields, records)
            if fast is not None:
                return fast
            msgs = [_message(fields, channel, body, flag, props) for flag, body, props in records]
        else:
            props = decode_text(field_str(fields, "properties", ""))
            msgs = [_message(fields, channel, req.body, field_int(fields, "flag", 0), props)]
        if len(msgs) > 1 and msgs[0].queue_id < 0:  # one batch, one queue, as RocketMQ does
            for m in msgs:
                m.queue_id = 0
        results = ctx.broker.sending.send(msgs, producer_group=fields.get("producerGroup") or None)
        if any(r.half_offset >= 0 for r in results):  # this channel can answer check-backs
            group = msgs[0].properties.get(PROPERTY_PRODUCER_GROUP, "")
            if group:
                ctx.sessions.half_sent(group, channel)
    except InvalidArgumentError as exc:
        return req.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
    return _answer(ctx, req, results)


Records = list[tuple[int, bytes, dict[str, str]]]


def _send_plain_batch(
    ctx: RemotingContext,
    channel: Channel,
    req: RemotingCommand,
    fields: dict[str, str],
    records: Records,
) -> RemotingCommand | None:
    """The fast lane (:mod:`.send_columns`); None when the batch needs the general path."""
    limits = ctx.broker.store.config
    batch = plain_columns(
        field_str(fields, "topic"),
        records,
        sys_flag=field_int(fields, "sysFlag", 0),
        born_ms=field_int(fields, "bornTimestamp", 0) or now_ms(),
        born_host=_peer_host(channel),
        max_body_bytes=limits.max_body_bytes,
        max_properties_bytes=limits.max_properties_bytes,
        queue_id=max(field_int(fields, "queueId", 0), 0),
    )
    if batch is None:
        return None
    sent = ctx.broker.sending.send_batch(batch)
    ext = {
        "msgId": ",".join(p[PROPERTY_UNIQ_KEY] for _, _, p in records),
        "queueId": str(int(sent.queue_ids[0])),  # a repeat's: its original queue
        "queueOffset": str(int(sent.queue_offsets[0])),
    }
    return req.response(ResponseCode.SUCCESS, ext_fields=ext)


def handle_end_transaction(
    ctx: RemotingContext, channel: Channel, req: RemotingCommand
) -> RemotingCommand | None:
    """END_TRANSACTION (37): commit (8) or roll back (12) a half message; 0 = unknown yet."""
    fields = req.ext_fields
    kind = field_int(fields, "commitOrRollback")
    if kind not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
        return req.response(ResponseCode.SUCCESS)  # still unknown: the broker checks back later
    msg_id = field_str(fields, "msgId", "")
    tx_id = fields.get("transactionId") or msg_id
    ctx.broker.sending.end_transaction(
        msg_id,
        tx_id,
        kind == TRANSACTION_COMMIT,
        from_check=field_bool(fields, "fromTransactionCheck"),
    )
    return req.response(ResponseCode.SUCCESS)
