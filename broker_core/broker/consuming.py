"""The broker's POP consumer calls: receive, ack, invisibility, dead-lettering, resend.

:class:`Consuming` checks the group and topic, names whose POP state a client uses
(``group_positions``), makes sure the retry and dead-letter topics exist, long-polls a
receive on the :class:`~broker_core.broker.topic_waiter.TopicWaiter`, and tells the trace
recorder what it delivered and how each delivery was settled; the state lives in the
:class:`~broker_core.broker.pop.pop.PopService`. The broker builds one and holds it as
``broker.consuming``; it needs nothing else of the broker.

Threads: every public method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from broker_core.broker.group_positions import GroupPositions
from broker_core.broker.groups import GroupManager
from broker_core.broker.lite import LiteSubscriptions, delivery_topic, receive_plan
from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.pop.pop import PopService
from broker_core.broker.resend import resend_copy
from broker_core.broker.sending import SendResult
from broker_core.broker.topic_waiter import TopicWaiter
from broker_core.broker.topics import TopicConfig, TopicManager
from broker_core.broker.trace.recorder import TraceRecorder
from broker_core.errors import InvalidArgumentError
from broker_core.message import Message, StoredMessage
from broker_core.protocol.filters import MessageFilter

Send = Callable[[Sequence[Message]], list[SendResult]]
FindMessage = Callable[[str, str], StoredMessage]  # (message id, topic) -> the message


class Consuming:
    """POP calls over the broker's POP service (see the module docstring).

    ``require_master`` raises NotMasterError on a slave; ``max_wait_ms`` is the broker's
    long-polling cap now (it may change live); ``find`` and ``send`` are the broker's
    query by id and send, which :meth:`resend` needs."""

    def __init__(
        self,
        pop: PopService,
        groups: GroupManager,
        topics: TopicManager,
        positions: GroupPositions,
        lite: LiteSubscriptions,
        waiter: TopicWaiter,
        trace: TraceRecorder,
        *,
        clock_ms: Callable[[], int],
        max_wait_ms: Callable[[], int],
        require_master: Callable[[], None],
        find: FindMessage,
        send: Send,
    ) -> None:
        self._pop, self._groups, self._topics, self._positions = pop, groups, topics, positions
        self._lite, self._waiter, self._trace = lite, waiter, trace
        self._clock_ms, self._max_wait_ms = clock_ms, max_wait_ms
        self._require_master, self._find, self._send = require_master, find, send

    # ---- POP consumers ----------------------------------------------------------------------

    def receive(
        self,
        group: str,
        topic: str,
        *,
        max_count: int,
        invisible_ms: int,
        filter: MessageFilter | None = None,
        queue_ids: Sequence[int] | None = None,
        timeout_ms: int = 0,
        client_id: str = "",
    ) -> list[PoppedMessage]:
        """POP receive; with ``timeout_ms`` waits for messages to arrive (long polling).

        ``client_id`` is required for a broadcasting group (each client its own progress).
        """
        self._require_master()  # POP keeps its state in the log: offset pulls work on slaves
        config = self._groups.get_or_create(group)
        if not config.consume_enable:
            raise InvalidArgumentError(f"consumer group {group} is disabled")
        state_group = self._positions.state_group(group, client_id)
        topic_config = self._topics.for_read(topic)
        retry = self._topics.ensure_retry_topic(group).name
        self._topics.ensure_dlq_topic(group)  # revive may dead-letter; readers need the topic
        ids = list(range(topic_config.read_queue_nums)) if queue_ids is None else list(queue_ids)
        deadline = self._clock_ms() + min(max(timeout_ms, 0), self._max_wait_ms())
        while True:
            ids, how = self._receive_plan(topic_config, group, client_id, ids)
            watched = (topic, retry, *how.get("topics", ()))
            seen = self._waiter.generation(watched)
            got = self._pop.receive(
                state_group,
                topic,
                ids,
                max_count=max_count,
                invisible_ms=invisible_ms,
                filter=filter,
                **how,
            )
            remaining = deadline - self._clock_ms()
            if got or remaining <= 0:
                self._trace.delivered(group, client_id, got, invisible_ms)
                return got
            self._waiter.wait(watched, seen, min(remaining, 1_000), who=group)

    def _receive_plan(
        self, topic_config: TopicConfig, group: str, client_id: str, ids: list[int]
    ) -> tuple[list[int], dict[str, Any]]:
        lites = (
            self._lite.topics_of(group, client_id, topic_config.name)
            if topic_config.message_type == "LITE"
            else []
        )
        return receive_plan(
            topic_config.message_type,
            topic_config.name,
            ids,
            group_fifo=self._groups.get_or_create(group).fifo,
            lite_topics=lites,
        )

    def sync_lite_subscription(
        self, group: str, client_id: str, topic: str, action: int, lite_topics: Sequence[str]
    ) -> frozenset[str]:
        """Apply a lite consumer's SyncLiteSubscription (see :meth:`LiteSubscriptions.sync`);
        the topic must exist (TopicNotFoundError); returns the client's lite topics after."""
        self._groups.get_or_create(group)
        return self._lite.sync(group, client_id, self._topics.require(topic), action, lite_topics)

    def ack(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        client_id: str = "",
        lite_topic: str = "",
    ) -> None:
        self._require_master()
        self._pop.ack(
            self._positions.state_group(group, client_id),
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
        )
        self._trace.settled("Ack", group, client_id, topic, receipt_handle)

    def change_invisible_duration(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        invisible_ms: int,
        *,
        client_id: str = "",
        lite_topic: str = "",
    ) -> str:
        state_group = self._positions.state_group(group, client_id)
        handle = self._pop.change_invisible_duration(
            state_group,
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
            invisible_ms,
        )
        self._trace.settled("Nack", group, client_id, topic, handle, invisible_ms)
        return handle

    def forward_to_dead_letter(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        client_id: str = "",
        lite_topic: str = "",
    ) -> None:
        self._topics.ensure_dlq_topic(group)
        self._pop.forward_to_dlq(
            self._positions.state_group(group, client_id),
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
        )

    def resend(self, message_id: str, topic: str, group: str) -> SendResult:
        """Resend a stored message of ``topic`` to ``group`` as a new message
        (``broker/resend.py``); MessageNotFoundError when this broker does not hold it."""
        self._groups.get_or_create(group)
        original = self._find(message_id, topic)
        self._topics.ensure_retry_topic(group)
        return self._send([resend_copy(original, group)])[0]
