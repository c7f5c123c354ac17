"""CHECK_TRANSACTION_STATE (39, broker -> producer): ask a 4.x producer about a half message.

The broker's transaction service asks a checker about every unresolved half message. The
remoting front end puts itself in front of the checker already set (the gRPC front end's):
when a remoting client heartbeats for the half's producer group, or a connection that sent
a half of that group is still open (``sessions.check_channels``), one of them (the first
whose connection takes the push) gets CHECK_TRANSACTION_STATE, oneway, as RocketMQ's
broker sends it: header ``msgId`` (the UNIQ_KEY), ``transactionId``, ``commitLogOffset``,
``tranStateTableOffset``, ``offsetMsgId``; body the half message as one ``MessageDecoder``
record under its real topic. The producer answers with END_TRANSACTION (37,
``fromTransactionCheck=true``). With no such client the previous checker is asked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from broker_core.broker.transaction.transaction import CheckRequest
from broker_core.errors import NotFoundError, RemotingError
from broker_core.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, offset_message_id
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.context import RemotingContext
from broker_core.remoting_broker.msgcodec import encode_message

log = logging.getLogger(__name__)

Checker = Callable[[CheckRequest], None]


def check_request(ctx: RemotingContext, request: CheckRequest) -> RemotingCommand:
    """The CHECK_TRANSACTION_STATE push for one half message."""
    half = request.half
    real_topic = half.properties.get(PROPERTY_REAL_TOPIC, half.topic)
    real_queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    shown = dataclasses.replace(
        half, topic=real_topic, queue_id=int(real_queue) if real_queue.isdigit() else 0
    )
    fields = {
        "msgId": request.message_id,
        "transactionId": request.transaction_id,
        "commitLogOffset": str(half.physical_offset),
        "tranStateTableOffset": str(half.queue_offset),
        "offsetMsgId": offset_message_id(ctx.host_port, half.physical_offset),
    }
    return RemotingCommand.request(
        RequestCode.CHECK_TRANSACTION_STATE,
        fields,
        encode_message(shown, ctx.host_port),
        oneway=True,
    )


def chained_checker(ctx: RemotingContext, fallback: Checker | None) -> Checker:
    """A checker that asks remoting producers of the group first, then ``fallback``."""

    def check(request: CheckRequest) -> None:
        for who, channel in ctx.sessions.check_channels(request.producer_group):
            try:
                channel.send(check_request(ctx, request))
                return
            except RemotingError as exc:
                log.info("check-back to %s failed: %s", who, exc)
        if fallback is None:
            raise NotFoundError(f"no producer of group {request.producer_group} is connected")
        fallback(request)

    return check
