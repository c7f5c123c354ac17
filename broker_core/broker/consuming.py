"""The consumer-group side of :class:`~broker_core.broker.broker.Broker` (a mixin).

POP receive, ack, invisibility changes and dead-lettering; committed offsets, resets and
a group's progress; client heartbeats, queue assignment and orderly-consumer locks. The
state lives in the broker's managers and services (declared below); this module only
holds the calls, so the broker's module stays its wiring, lifecycle and send/pull paths.

Threads: every public method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from broker_core.broker.clients import ClientKind, ClientRegistry
from broker_core.broker.group_positions import GroupPositions
from broker_core.broker.groups import GroupConfig, GroupManager
from broker_core.broker.lite import LiteSubscriptions, delivery_topic, receive_plan
from broker_core.broker.locks import QueueLockManager
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.pop.pop import PopService
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.resend import resend_copy
from broker_core.broker.retry import is_retry_topic
from broker_core.broker.sending import SendResult
from broker_core.broker.topic_waiter import TopicWaiter
from broker_core.broker.topics import TopicConfig, TopicManager
from broker_core.broker.trace.recorder import TraceRecorder
from broker_core.config import BrokerConfig
from broker_core.errors import GroupNotFoundError, InvalidArgumentError
from broker_core.message import Message, validate_group_name
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore


class ConsumerCalls:
    """Consumer-group calls over the broker's state (see the module docstring)."""

    config: BrokerConfig
    store: MessageStore
    topics: TopicManager
    groups: GroupManager
    offsets: ConsumerOffsetManager
    clients: ClientRegistry
    positions: GroupPositions
    locks: QueueLockManager
    lite: LiteSubscriptions
    pop: PopService
    waiter: TopicWaiter
    trace: TraceRecorder
    _clock_ms: Callable[[], int]

    if TYPE_CHECKING:  # the broker's own, used here

        def group(self, name: str) -> GroupConfig: ...

        def require_master(self) -> None: ...

        def read_queues(self, topic: str) -> list[MessageQueue]: ...

        def send(self, messages: Sequence[Message]) -> list[SendResult]: ...

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
        self.require_master()  # POP keeps its state in the log: offset pulls work on slaves
        config = self.group(group)
        if not config.consume_enable:
            raise InvalidArgumentError(f"consumer group {group} is disabled")
        state_group = self.positions.state_group(group, client_id)
        topic_config = self.topics.for_read(topic)
        retry = self.topics.ensure_retry_topic(group).name
        self.topics.ensure_dlq_topic(group)  # revive may dead-letter; readers need the topic
        ids = list(range(topic_config.read_queue_nums)) if queue_ids is None else list(queue_ids)
        deadline = self._clock_ms() + min(max(timeout_ms, 0), self.config.max_long_polling_ms)
        while True:
            ids, how = self._receive_plan(topic_config, group, client_id, ids)
            watched = (topic, retry, *how.get("topics", ()))
            seen = self.waiter.generation(watched)
            got = self.pop.receive(
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
                self.trace.delivered(group, client_id, got, invisible_ms)
                return got
            self.waiter.wait(watched, seen, min(remaining, 1_000), who=group)

    def _receive_plan(
        self, topic_config: TopicConfig, group: str, client_id: str, ids: list[int]
    ) -> tuple[list[int], dict[str, Any]]:
        lites = (
            self.lite.topics_of(group, client_id, topic_config.name)
            if topic_config.message_type == "LITE"
            else []
        )
        return receive_plan(
            topic_config.message_type,
            topic_config.name,
            ids,
            group_fifo=self.group(group).fifo,
            lite_topics=lites,
        )

    def sync_lite_subscription(
        self, group: str, client_id: str, topic: str, action: int, lite_topics: Sequence[str]
    ) -> frozenset[str]:
        """Apply a lite consumer's SyncLiteSubscription (see :meth:`LiteSubscriptions.sync`);
        the topic must exist (TopicNotFoundError); returns the client's lite topics after."""
        self.group(group)
        return self.lite.sync(group, client_id, self.topics.require(topic), action, lite_topics)

    def ack(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        client_id: str = "",
        lite_topic: str = "",
    ) -> None:
        self.require_master()
        self.pop.ack(
            self.positions.state_group(group, client_id),
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
        )
        self.trace.settled("Ack", group, client_id, topic, receipt_handle)

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
        state_group = self.positions.state_group(group, client_id)
        handle = self.pop.change_invisible_duration(
            state_group,
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
            invisible_ms,
        )
        self.trace.settled("Nack", group, client_id, topic, handle, invisible_ms)
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
        self.topics.ensure_dlq_topic(group)
        self.pop.forward_to_dlq(
            self.positions.state_group(group, client_id),
            delivery_topic(topic, lite_topic, receipt_handle),
            receipt_handle,
        )

    def resend(self, message_id: str, topic: str, group: str) -> SendResult:
        """Resend a stored message of ``topic`` to ``group`` as a new message
        (``broker/resend.py``); MessageNotFoundError when this broker does not hold it."""
        self.group(group)
        original = self.store.query_by_id(message_id, topic)
        self.topics.ensure_retry_topic(group)
        return self.send([resend_copy(original, group)])[0]

    # ---- offsets ----------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.group(group)
        self.topics.require(topic)
        self.offsets.commit(group, topic, queue_id, offset)

    def consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset, or where it starts (its consume-from-where)."""
        committed = self.offsets.query(group, topic, queue_id)
        if committed is not None:
            return committed
        # A query creates nothing: an unknown group is read with the default settings
        # (or refused when groups are not auto-created).
        config = self.groups.get(validate_group_name(group))
        if config is None and not self.groups.auto_create:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist and auto-create is off"
            )
        return self.positions.configured_start(config or GroupConfig(group), topic, queue_id)

    def starts_in_memory(self, topic: str, queue_id: int) -> bool:
        """Whether a group without an offset starts this queue at 0 (see
        :meth:`GroupPositions.starts_in_memory`)."""
        return self.positions.starts_in_memory(topic, queue_id)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in a queue, None if it never committed there."""
        return self.offsets.query(group, topic, queue_id)

    def queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset) of one queue (max = the next offset to be written)."""
        return self.store.min_offset(topic, queue_id), self.store.max_offset(topic, queue_id)

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of a queue stored at or after ``timestamp_ms``."""
        return self.store.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def reset_offsets(self, group: str, topic: str, to: str | int) -> dict[int, int]:
        """Move a group to ``earliest``, ``latest`` or a timestamp (ms) in every queue.

        Live POP consumers read from there on their next receive (in-flight deliveries of
        the topic end); every client of a broadcasting group is moved. GroupNotFoundError
        for a group that does not exist: a reset must not create one (a typo would
        otherwise succeed and leave a stray group behind).
        """
        queues = self.read_queues(topic)  # TopicNotFoundError first
        if self.groups.get(validate_group_name(group)) is None:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist; create it "
                f"first (rmq group create {group})"
            )
        members = self.positions.members(group)
        result = {}
        for mq in queues:
            qid = mq.queue_id
            if to == "earliest":
                offset = self.store.min_offset(topic, qid)
            elif to == "latest":
                offset = self.store.max_offset(topic, qid)
            elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
                offset = self.store.offset_for_timestamp(topic, qid, to)
            else:
                raise InvalidArgumentError(f"reset to 'earliest', 'latest' or a ms time: {to!r}")
            for state_group in (group, *members):
                self.pop.reset_offset(state_group, topic, qid, offset)
            result[qid] = offset
        self.offsets.persist()
        return result

    # ---- clients, rebalance and locks ---------------------------------------------------------

    def heartbeat(
        self, group: str, client_id: str, *, topics: Sequence[str], kind: ClientKind
    ) -> bool:
        if kind == "consumer":
            self.group(group)
        return self.clients.heartbeat(group, client_id, topics=topics, kind=kind)

    def assignment(self, group: str, topic: str, client_id: str) -> list[MessageQueue]:
        config = self.group(group)
        return self.clients.assignment(
            group,
            topic,
            client_id,
            self.read_queues(topic),
            config.rebalance_strategy,
            broadcast=config.broadcast,
        )

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock ``queues`` for an orderly consumer (``locks.py``); returns those it holds."""
        self.group(group)
        return self.locks.lock(group, client_id, queues)

    def unlock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Release those of ``queues`` that ``client_id`` holds; returns them."""
        return self.locks.unlock(group, client_id, queues)

    def group_progress(self, group: str) -> list[tuple[str, int, int, int, int]]:
        """(topic, queue id, broker max offset, consumer offset, lag) of every queue.

        A broadcasting group shows its slowest live client per queue (every stored client
        when none is live). A dead-letter topic the group drains is shown; its own retry
        topic is not.
        """
        offsets = self.offsets.queues_of(group)
        config = self.groups.get(group)
        if config is not None and config.broadcast:
            offsets = self.positions.slowest(group) or offsets
        rows = []
        for (topic, qid), offset in sorted(offsets.items()):
            if is_retry_topic(topic) or self.topics.get(topic) is None:
                continue
            high = self.store.max_offset(topic, qid)
            rows.append((topic, qid, high, offset, max(0, high - offset)))
        return rows
