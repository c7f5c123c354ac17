"""Pure POP decisions: where an expired delivery goes next, and the copy that goes there.

No I/O and no state; safe from any thread. The POP service (``pop.py``) applies these.

Counting follows ``retry.py``: ``attempt`` is the delivery attempt that just ended
unacked (1 = the first delivery). The next delivery, wherever it happens, is attempt
``attempt + 1`` and a copy carries ``reconsume_times = attempt``.

>>> from broker_core.broker.retry import RetryPolicy
>>> revive_decision("g", "orders", 1, RetryPolicy(max_retries=1), fifo=False, now_ms=0)
ReviveDecision(destination=<Destination.RETRY: 'retry'>, topic='%RETRY%g', reconsume_times=1)
>>> revive_decision("g", "orders", 2, RetryPolicy(max_retries=1), fifo=False, now_ms=0).topic
'%DLQ%g'
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from broker_core.broker.retry import (
    DeadLetter,
    RetryPolicy,
    dlq_topic,
    is_dlq_topic,
    is_retry_topic,
    next_delivery,
    retry_topic,
)
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_ID,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
)
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_MASK

COPY_QUEUE_ID = 0  # retry and DLQ topics have one queue, as in RocketMQ


class Destination(StrEnum):
    RETRY = "retry"  # a copy goes to %RETRY%{group}; the original delivery is resolved
    IN_PLACE = "in_place"  # FIFO: the same queue offset becomes visible again
    DLQ = "dlq"  # a copy goes to %DLQ%{group}; never delivered again


@dataclass(frozen=True, slots=True)
class ReviveDecision:
    """What to do with a delivery whose invisible time ended without an ack."""

    destination: Destination
    topic: str  # where the message is visible next: retry, its own queue topic, or DLQ
    reconsume_times: int  # attempts made so far; the next delivery is this + 1


def revive_decision(
    group: str, queue_topic: str, attempt: int, policy: RetryPolicy, *, fifo: bool, now_ms: int
) -> ReviveDecision:
    """Decide the fate of delivery ``attempt`` of a message popped from ``queue_topic``.

    ``retry.next_delivery`` says whether retries remain (``attempt <= max_retries``).
    If not, DLQ. If so, FIFO groups redeliver in place (order is kept by not moving the
    message); other groups get a copy in the retry topic. The invisible time itself is
    the backoff (a client that wants the policy's delay nacks with it), so the retry
    copy is visible at once. Raises InvalidArgumentError for ``attempt < 1``.
    """
    decision = next_delivery(policy, attempt, now_ms)
    if isinstance(decision, DeadLetter):
        return ReviveDecision(Destination.DLQ, dlq_topic(group), attempt)
    if fifo:
        return ReviveDecision(Destination.IN_PLACE, queue_topic, attempt)
    return ReviveDecision(Destination.RETRY, retry_topic(group), attempt)


def original_topic(message: StoredMessage) -> str:
    """The topic the message was produced to, also for copies in retry/DLQ topics."""
    if is_retry_topic(message.topic) or is_dlq_topic(message.topic):
        return message.properties.get(PROPERTY_RETRY_TOPIC) or message.topic
    return message.topic


def delivered_topic(queue_topic: str, message: StoredMessage) -> str:
    """The topic a consumer is told a message popped from ``queue_topic`` belongs to.

    A copy in a retry topic is delivered as its original topic (the group subscribed to
    that one). Anything else, a dead-letter topic a consumer drains included, is
    delivered as the topic it was popped from, which is the topic the consumer acks.
    """
    return original_topic(message) if is_retry_topic(queue_topic) else queue_topic


def delivery_attempt(message: StoredMessage) -> int:
    """Attempt number of a first pop of ``message`` (retry copies carry earlier attempts)."""
    return message.reconsume_times + 1


def revive_copy(
    message: StoredMessage, topic: str, reconsume_times: int, from_topic: str | None = None
) -> Message:
    """The copy of ``message`` to put into ``topic`` (a retry or DLQ topic).

    Keeps the client-visible id (UNIQ_KEY; the offset id becomes it when the producer
    sent none), records the topic it was delivered as (``from_topic``, by default the
    original one) in RETRY_TOPIC and the first id in
    ORIGIN_MESSAGE_ID, and drops delay properties so nothing re-delays the copy.
    """
    props = dict(message.properties)
    message_id = message.message_id
    props.setdefault(PROPERTY_UNIQ_KEY, message_id)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, message_id)
    props[PROPERTY_RETRY_TOPIC] = from_topic or original_topic(message)
    for key in (PROPERTY_DELAY_LEVEL, PROPERTY_DELIVER_TIME_MS, PROPERTY_TIMER_ID):
        props.pop(key, None)
    return Message(
        topic,
        message.body,
        queue_id=COPY_QUEUE_ID,
        properties=props,
        flag=message.flag,
        sys_flag=message.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
        born_timestamp_ms=message.born_timestamp_ms,
        born_host=message.born_host,
        reconsume_times=reconsume_times,
    )
