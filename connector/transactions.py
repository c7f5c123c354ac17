"""Transactional sends and their ends, over a :class:`RocketMQClient`'s own channel.

Our client sends plain messages only; the exactly-once sink needs two more calls, built
here with the ``rocketmq.grpc_protocol`` stubs and sent through the client's retrying
``call`` (so they get its channel, metadata, retries and error mapping):

* :func:`prepare` — ONE ``SendMessage`` whose messages are all of type TRANSACTION: the
  broker stores each as an invisible *half* message. The broker takes the topic as the
  producer group (as RocketMQ's proxy does), so one request holds one topic only. Each
  half carries ``orphaned_transaction_recovery_duration``: the broker does not check it
  back before that much time has passed. A retried request resends the same message
  ids, which the broker's prepare treats as the same halves (idempotent).
* :func:`end` — ``EndTransaction`` COMMIT (the message becomes visible in its topic) or
  ROLLBACK, by topic + message id + transaction id. The transaction id is the one the
  broker returned (it is the message id: clients cannot choose another).

A half nobody ends is checked back with a live producer of its topic; with none connected
the broker rolls it back after ``transaction_max_checks`` checks, i.e. about
``recovery duration + max_checks × transaction_check_timeout_ms`` after it was sent.

Stateless: every function takes the client it uses; safe from any thread.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import RocketMQClient, wire
from broker_core.client.errors import check
from broker_core.client.model import OutgoingMessage
from broker_core.errors import InvalidArgumentError, MessageNotFoundError, RocketMQError


@dataclass(frozen=True, slots=True)
class HalfRef:
    """One prepared message: what ending it needs, plus what identifies its content.

    ``body_crc`` (CRC32 of the body) lets a replayed attempt's half stand in for a lost
    one only when it carries the same body; ``message_group`` ("" for none) keeps the
    commit order of a FIFO group.
    """

    topic: str
    message_id: str
    transaction_id: str
    body_crc: int
    message_group: str = ""

    def to_json(self) -> list[Any]:
        return [self.topic, self.message_id, self.transaction_id, self.body_crc, self.message_group]

    @classmethod
    def from_json(cls, item: Sequence[Any]) -> HalfRef:
        topic, message_id, transaction_id, body_crc, group = item
        return cls(str(topic), str(message_id), str(transaction_id), int(body_crc), str(group))


class EndOutcome(enum.Enum):
    """What an :func:`end` call found."""

    ENDED = "ended"  # this call committed / rolled back the half
    ALREADY_COMMITTED = "already_committed"
    ALREADY_ROLLED_BACK = "already_rolled_back"
    UNKNOWN = "unknown"  # no live half; the broker no longer remembers how it ended


def prepare(
    client: RocketMQClient, topic: str, messages: Sequence[OutgoingMessage], *, recovery_ms: int
) -> list[HalfRef]:
    """Send ``messages`` to ``topic`` as half messages in one request; refs in order.

    ``recovery_ms`` (>= 1000; whole seconds count) is how long the broker waits before
    its first check-back. Raises InvalidArgumentError for a message with a delivery
    time (the broker refuses timed transactional messages) and the broker's errors.
    """
    if recovery_ms < 1000:
        raise InvalidArgumentError(f"recovery_ms must be >= 1000, got {recovery_ms}")
    if any(msg.delivery_timestamp_ms is not None for msg in messages):
        raise InvalidArgumentError("a transactional message cannot have a delivery time")
    request, count = wire.encode_messages(
        topic, messages, namespace=client.namespace, transaction_recovery_ms=recovery_ms
    )
    if not count:
        raise InvalidArgumentError("prepare needs at least one message")
    response = client.call("SendMessage", request)
    if len(response.entries) != count:
        raise RocketMQError(f"broker answered {len(response.entries)} entries for {count} messages")
    refs = []
    for message, entry in zip(map(OutgoingMessage.of, messages), response.entries, strict=True):
        check(entry.status)
        refs.append(
            HalfRef(
                topic,
                entry.message_id,
                entry.transaction_id or entry.message_id,
                zlib.crc32(message.body) & 0xFFFFFFFF,
                message.message_group or "",
            )
        )
    return refs


def end(client: RocketMQClient, half: HalfRef, *, commit: bool) -> EndOutcome:
    """Commit or roll back ``half``; idempotent (a second end reports how it ended).

    Raises InvalidArgumentError when the transaction id is not the half's, and the
    broker's other errors (after the client's retries).
    """
    request = service_pb2.EndTransactionRequest(
        message_id=half.message_id,
        transaction_id=half.transaction_id,
        resolution=(
            pb.TransactionResolution.COMMIT if commit else pb.TransactionResolution.ROLLBACK
        ),
        source=pb.TransactionSource.SOURCE_CLIENT,
    )
    request.topic.name = half.topic
    request.topic.resource_namespace = client.namespace
    try:
        client.call("EndTransaction", request)
    except MessageNotFoundError as exc:
        text = str(exc)
        if "already committed" in text:
            return EndOutcome.ALREADY_COMMITTED
        if "already rolled back" in text:
            return EndOutcome.ALREADY_ROLLED_BACK
        return EndOutcome.UNKNOWN
    return EndOutcome.ENDED


def is_visible(client: RocketMQClient, half: HalfRef) -> bool:
    """True if the message of ``half`` can be found in its topic (it was committed)."""
    try:
        client.query_message(message_id=half.message_id, topic=half.topic, max_results=1)
    except MessageNotFoundError:
        return False
    return True
