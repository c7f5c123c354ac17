"""Lite topics and priority messages: RocketMQ 5's two newest message types.

**Lite topics.** A *parent* topic of message type LITE holds any number of lite topics,
named by the producer per message (``SystemProperties.lite_topic``). Each lite topic is
its own one-queue topic, ``%LMQ%{parent}|{lite}`` (:func:`lmq_topic`, RocketMQ's LMQ),
made in the store by its first message and, like an LMQ, not listed in the topic table
(lite topics are many and short-lived), so every lite topic keeps its own order and
every consumer group its own progress in it. A lite consumer (LitePushConsumer / LiteSimpleConsumer)
binds a group to the parent topic and tells the broker which lite topics it wants with
``SyncLiteSubscription``; its receives deliver only from those, in order per lite topic
(a lite topic has no retry topic: a message that was not acked is delivered again from
its own queue before the ones after it). :class:`LiteSubscriptions` keeps who wants what.

**Priority.** A message with ``SystemProperties.priority`` p ≥ 0 goes to queue
``min(p, write queues - 1)`` of its topic (:func:`priority_queue`), whatever the topic's
type; a POP receive on a topic of message type PRIORITY reads the queues from the highest
id down (:func:`priority_scan_order`), so the highest priority waiting is delivered first
and messages of one priority stay in send order. Retried messages come after every
priority (RocketMQ's default ``popFromRetryProbabilityForPriority`` = 0).

Pure policy: no I/O; thread-safe where it keeps state.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any, Final

from broker_core.broker.pop.receipt import decode_handle
from broker_core.broker.topics import TopicConfig
from broker_core.errors import (
    InvalidArgumentError,
    InvalidLiteTopicError,
    InvalidReceiptHandleError,
    LiteQuotaExceededError,
)
from broker_core.message import MAX_TOPIC_NAME_CHARS, Message
from broker_core.protocol.properties import PROPERTY_LITE_TOPIC, PROPERTY_PRIORITY

LMQ_PREFIX: Final = "%LMQ%"
_SEPARATOR: Final = "|"
MAX_LITE_TOPIC_CHARS: Final = 64  # sent to lite consumers as max_lite_topic_size
LITE_SUBSCRIPTION_QUOTA: Final = 1_000  # lite topics one client may subscribe to
_LITE_RE: Final = re.compile(r"^[a-zA-Z0-9_-]+$")

# SyncLiteSubscription actions (apache.rocketmq.v2.LiteSubscriptionAction values)
PARTIAL_ADD, PARTIAL_REMOVE, COMPLETE_ADD, COMPLETE_REMOVE = 0, 1, 2, 3


def validate_lite_topic(name: str) -> str:
    """Return ``name`` if it is a legal lite topic name, else raise InvalidLiteTopicError."""
    if not name or not name.strip():
        raise InvalidLiteTopicError("lite topic name is blank")
    if len(name) > MAX_LITE_TOPIC_CHARS:
        raise InvalidLiteTopicError(
            f"lite topic {name[:40]!r}… is {len(name)} chars, over {MAX_LITE_TOPIC_CHARS}"
        )
    if not _LITE_RE.match(name):
        raise InvalidLiteTopicError(f"lite topic {name!r} has characters outside [a-zA-Z0-9_-]")
    return name


def lmq_topic(parent: str, lite: str) -> str:
    """The one-queue topic that stores lite topic ``lite`` of ``parent``.

    Raises InvalidLiteTopicError for a bad lite name or when the two names together are
    longer than a topic name may be.
    """
    name = f"{LMQ_PREFIX}{parent}{_SEPARATOR}{validate_lite_topic(lite)}"
    if len(name) > MAX_TOPIC_NAME_CHARS:
        raise InvalidLiteTopicError(
            f"lite topic {lite!r} of {parent!r} makes a {len(name)}-char queue name, "
            f"over {MAX_TOPIC_NAME_CHARS}"
        )
    return name


def split_lmq(topic: str) -> tuple[str, str] | None:
    """``(parent, lite)`` for a topic made by :func:`lmq_topic`; None for any other topic."""
    if not topic.startswith(LMQ_PREFIX):
        return None
    parent, sep, lite = topic[len(LMQ_PREFIX) :].rpartition(_SEPARATOR)
    return (parent, lite) if sep and parent and lite else None


def delivery_topic(topic: str, lite_topic: str, receipt_handle: str) -> str:
    """The topic a delivery being acked (or changed, or dead-lettered) lives in.

    The lite topic's own when the request names one; else, when the receipt handle is
    for a lite topic of ``topic`` (a client that does not send ``lite_topic``), that
    one; else ``topic``. A handle that does not decode is left for the caller to refuse.
    """
    if lite_topic:
        return lmq_topic(topic, lite_topic)
    try:
        handle_topic = decode_handle(receipt_handle).topic
    except InvalidReceiptHandleError:
        return topic
    parts = split_lmq(handle_topic)
    return handle_topic if parts is not None and parts[0] == topic else topic


def priority_queue(priority: int, write_queue_nums: int) -> int:
    """The queue a message of ``priority`` (≥ 0) is written to."""
    return min(priority, write_queue_nums - 1)


def route(msg: Message, kind: str, config: TopicConfig) -> TopicConfig:
    """Place a PRIORITY or LITE message (``kind``) sent to the topic of ``config``.

    A priority message goes to queue :func:`priority_queue` of its topic, whatever the
    client named; a lite message to queue 0 of its lite topic's own topic, which is kept
    out of the topic table as RocketMQ keeps its LMQs (lite topics are many and
    short-lived: a table entry each would rewrite ``topics.json`` every time). Returns the
    config of the topic written. InvalidArgumentError for a priority that is not an int ≥ 0.
    """
    if kind == "PRIORITY":
        priority = msg.properties[PROPERTY_PRIORITY]
        if not priority.isdigit():
            raise InvalidArgumentError(f"priority must be an int ≥ 0, got {priority!r}")
        msg.queue_id = priority_queue(int(priority), config.write_queue_nums)
        return config
    msg.topic = lmq_topic(msg.topic, msg.properties[PROPERTY_LITE_TOPIC])
    msg.queue_id = 0
    return TopicConfig(msg.topic, 1, 1)


def priority_scan_order(read_queue_nums: int) -> list[int]:
    """Queue ids of a PRIORITY topic in the order a receive reads them: highest first."""
    return list(range(read_queue_nums - 1, -1, -1))


def receive_plan(
    message_type: str, topic: str, queue_ids: list[int], *, group_fifo: bool, lite_topics: list[str]
) -> tuple[list[int], dict[str, Any]]:
    """The queues and ``PopService.receive`` options of one POP receive on ``topic``.

    A PRIORITY topic (for a group that is not FIFO) reads its highest queue first and its
    retries last; a LITE topic reads the client's ``lite_topics`` in order, without a
    retry topic; any other topic reads ``queue_ids`` with the defaults.
    """
    if message_type == "PRIORITY" and not group_fifo:
        wanted = set(queue_ids)
        order = [q for q in priority_scan_order(max(queue_ids, default=-1) + 1) if q in wanted]
        return order, {"retry": "last"}
    if message_type == "LITE":
        return [], {
            "retry": "none",
            "fifo": True,
            "topics": [lmq_topic(topic, lite) for lite in lite_topics],
        }
    return queue_ids, {}


class LiteSubscriptions:
    """Which lite topics of which parent each client of each group wants.

    Keys are ``(group, client id)``; a client binds one parent topic (a second parent
    for the same key replaces the first). Memory only: clients resend their whole set
    every 30 s (COMPLETE_ADD), so a restarted broker is refilled within that.
    """

    def __init__(self, quota: int = LITE_SUBSCRIPTION_QUOTA) -> None:
        self._quota = quota
        self._lock = threading.Lock()
        self._subs: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}

    def sync(
        self,
        group: str,
        client_id: str,
        parent_config: TopicConfig,
        action: int,
        lite_topics: Iterable[str],
    ) -> frozenset[str]:
        """Apply one SyncLiteSubscription; returns the client's set afterwards.

        Raises InvalidArgumentError when the parent is not a LITE topic or ``client_id`` is
        empty, InvalidLiteTopicError for a bad name or action, and LiteQuotaExceededError
        when the set would grow past the quota (nothing changes on any error).
        """
        parent = parent_config.name
        if parent_config.message_type != "LITE":
            raise InvalidArgumentError(
                f"topic {parent} is a {parent_config.message_type} "
                f"topic; lite consumers bind a LITE topic"
            )
        if not client_id:
            raise InvalidArgumentError("a lite subscription needs the client's id")
        names = frozenset(validate_lite_topic(n) for n in lite_topics)
        key = (group, client_id)
        with self._lock:
            old_parent, current = self._subs.get(key, (parent, frozenset()))
            if old_parent != parent:
                current = frozenset()
            if action == PARTIAL_ADD:
                new = current | names
            elif action == PARTIAL_REMOVE:
                new = current - names
            elif action == COMPLETE_ADD:
                new = names
            elif action == COMPLETE_REMOVE:
                new = frozenset()
            else:
                raise InvalidLiteTopicError(f"unknown lite subscription action {action}")
            if len(new) > self._quota and len(new) > len(current):
                raise LiteQuotaExceededError(
                    f"client {client_id} of {group} would subscribe {len(new)} lite topics, "
                    f"over the quota of {self._quota}"
                )
            if new:
                self._subs[key] = (parent, new)
            else:
                self._subs.pop(key, None)
            return new

    def topics_of(self, group: str, client_id: str, parent: str) -> list[str]:
        """The lite topics of ``parent`` the client wants, sorted (empty if none)."""
        with self._lock:
            bound, names = self._subs.get((group, client_id), (parent, frozenset()))
        return sorted(names) if bound == parent else []

    def forget_client(self, client_id: str) -> None:
        """Drop every subscription of a client that left."""
        with self._lock:
            for key in [k for k in self._subs if k[1] == client_id]:
                del self._subs[key]

    @property
    def quota(self) -> int:
        return self._quota
