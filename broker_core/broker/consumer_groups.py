"""The broker's consumer-group calls: committed offsets, resets, progress and membership.

:class:`ConsumerGroups` commits and reads a group's offsets (and where a group without
one starts), answers offset queries of a queue (bounds, by time), moves a group to a
point (resetting its POP state and that of every member of a broadcasting group), shows
its progress, and keeps its live members: heartbeats, queue assignment and the
orderly-consumer queue locks. The broker builds one and holds it as
``broker.consumer_groups``; it needs nothing else of the broker.

Threads: every public method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker_core.broker.clients import ClientKind, ClientRegistry
from broker_core.broker.group_positions import GroupPositions
from broker_core.broker.groups import GroupConfig, GroupManager
from broker_core.broker.locks import QueueLockManager
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pop.pop import PopService
from broker_core.broker.rebalance import MessageQueue
from broker_core.broker.retry import is_retry_topic
from broker_core.broker.topics import TopicManager
from broker_core.errors import GroupNotFoundError, InvalidArgumentError
from broker_core.message import validate_group_name
from broker_core.store.message_store import MessageStore


class ConsumerGroups:
    """Offsets, resets, progress and members of consumer groups (see the module docstring).

    ``store`` is read for queue bounds only; ``pop`` is where a reset moves POP state."""

    def __init__(
        self,
        groups: GroupManager,
        topics: TopicManager,
        offsets: ConsumerOffsetManager,
        positions: GroupPositions,
        clients: ClientRegistry,
        locks: QueueLockManager,
        pop: PopService,
        store: MessageStore,
        *,
        broker_name: str,
    ) -> None:
        self._groups, self._topics, self._offsets = groups, topics, offsets
        self._positions, self._clients, self._locks = positions, clients, locks
        self._pop, self._store, self._broker_name = pop, store, broker_name

    def _read_queues(self, topic: str) -> list[MessageQueue]:
        return self._topics.for_read(topic).read_queues(self._broker_name)

    # ---- offsets ----------------------------------------------------------------------------

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._groups.get_or_create(group)
        self._topics.require(topic)
        self._offsets.commit(group, topic, queue_id, offset)

    def consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset, or where it starts (its consume-from-where)."""
        committed = self._offsets.query(group, topic, queue_id)
        if committed is not None:
            return committed
        # A query creates nothing: an unknown group is read with the default settings
        # (or refused when groups are not auto-created).
        config = self._groups.get(validate_group_name(group))
        if config is None and not self._groups.auto_create:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist and auto-create is off"
            )
        return self._positions.configured_start(config or GroupConfig(group), topic, queue_id)

    def starts_in_memory(self, topic: str, queue_id: int) -> bool:
        """Whether a group without an offset starts this queue at 0 (see
        :meth:`GroupPositions.starts_in_memory`)."""
        return self._positions.starts_in_memory(topic, queue_id)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in a queue, None if it never committed there."""
        return self._offsets.query(group, topic, queue_id)

    def queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset) of one queue (max = the next offset to be written)."""
        return self._store.min_offset(topic, queue_id), self._store.max_offset(topic, queue_id)

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of a queue stored at or after ``timestamp_ms``."""
        return self._store.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def reset_offsets(self, group: str, topic: str, to: str | int) -> dict[int, int]:
        """Move a group to ``earliest``, ``latest`` or a timestamp (ms) in every queue.

        Live POP consumers read from there on their next receive (in-flight deliveries of
        the topic end); every client of a broadcasting group is moved. GroupNotFoundError
        for a group that does not exist: a reset must not create one (a typo would
        otherwise succeed and leave a stray group behind).
        """
        queues = self._read_queues(topic)  # TopicNotFoundError first
        if self._groups.get(validate_group_name(group)) is None:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist; create it "
                f"first (rmq group create {group})"
            )
        members = self._positions.members(group)
        result = {}
        for mq in queues:
            qid = mq.queue_id
            if to == "earliest":
                offset = self._store.min_offset(topic, qid)
            elif to == "latest":
                offset = self._store.max_offset(topic, qid)
            elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
                offset = self._store.offset_for_timestamp(topic, qid, to)
            else:
                raise InvalidArgumentError(f"reset to 'earliest', 'latest' or a ms time: {to!r}")
            for state_group in (group, *members):
                self._pop.reset_offset(state_group, topic, qid, offset)
            result[qid] = offset
        self._offsets.persist()
        return result

    # ---- clients, rebalance and locks ---------------------------------------------------------

    def heartbeat(
        self, group: str, client_id: str, *, topics: Sequence[str], kind: ClientKind
    ) -> bool:
        if kind == "consumer":
            self._groups.get_or_create(group)
        return self._clients.heartbeat(group, client_id, topics=topics, kind=kind)

    def assignment(self, group: str, topic: str, client_id: str) -> list[MessageQueue]:
        config = self._groups.get_or_create(group)
        return self._clients.assignment(
            group,
            topic,
            client_id,
            self._read_queues(topic),
            config.rebalance_strategy,
            broadcast=config.broadcast,
        )

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock ``queues`` for an orderly consumer (``locks.py``); returns those it holds."""
        self._groups.get_or_create(group)
        return self._locks.lock(group, client_id, queues)

    def unlock_queues(
        self, group: str, client_id: str, queues: Sequence[MessageQueue]
    ) -> set[MessageQueue]:
        """Release those of ``queues`` that ``client_id`` holds; returns them."""
        return self._locks.unlock(group, client_id, queues)

    def group_progress(self, group: str) -> list[tuple[str, int, int, int, int]]:
        """(topic, queue id, broker max offset, consumer offset, lag) of every queue.

        A broadcasting group shows its slowest live client per queue (every stored client
        when none is live). A dead-letter topic the group drains is shown; its own retry
        topic is not.
        """
        offsets = self._offsets.queues_of(group)
        config = self._groups.get(group)
        if config is not None and config.broadcast:
            offsets = self._positions.slowest(group) or offsets
        rows = []
        for (topic, qid), offset in sorted(offsets.items()):
            if is_retry_topic(topic) or self._topics.get(topic) is None:
                continue
            high = self._store.max_offset(topic, qid)
            rows.append((topic, qid, high, offset, max(0, high - offset)))
        return rows
