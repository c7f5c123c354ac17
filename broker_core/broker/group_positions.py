"""Where a consumer group's clients stand: POP state names, start offsets, progress.

A clustering group keeps one position per queue, under its own name. A broadcasting
group keeps one per client, under :func:`groups.broadcast_member` names (as RocketMQ
keeps broadcasting offsets per client), so every live client gets every message.
:class:`GroupPositions` answers, for the broker:

* which name a client's POP state lives under (:meth:`state_group`);
* where a group new to a queue starts: its consume-from setting
  (:meth:`configured_start`), and for POP also the first offset of retry topics and of
  groups nobody configured (:meth:`pop_initial_offset`);
* which member names a broadcasting group has stored (:meth:`members`) and its slowest
  live client per queue (:meth:`slowest`), which is what progress shows.

Threads: stateless over thread-safe managers; callable from any thread.
"""

from __future__ import annotations

from broker_core.broker.clients import ClientRegistry
from broker_core.broker.groups import GroupConfig, GroupManager, base_group, broadcast_member
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.retry import is_retry_topic
from broker_core.errors import InvalidArgumentError
from broker_core.store.message_store import MessageStore


class GroupPositions:
    """Position rules over the broker's groups, offsets, clients and store."""

    def __init__(
        self,
        groups: GroupManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        store: MessageStore,
    ) -> None:
        self._groups, self._offsets, self._clients, self._store = groups, offsets, clients, store

    def state_group(self, group: str, client_id: str) -> str:
        """Whose POP state a client of ``group`` uses: the group's, or in a broadcasting
        group the client's own (InvalidArgumentError when no client id is given)."""
        if not self._groups.get_or_create(group).broadcast:
            return group
        if not client_id:
            raise InvalidArgumentError(
                f"consumer group {group} is broadcasting: a consumer must send its client id"
            )
        return broadcast_member(group, client_id)

    def configured_start(
        self, config: GroupConfig, topic: str, queue_id: int, *, pop: bool = False
    ) -> int:
        """Where ``config`` says a group new to the queue starts.

        ``last_offset`` follows RocketMQ: a queue whose first message is still in memory
        (:meth:`starts_in_memory`) is read from 0, so a group made before its consumers
        still gets what was sent in between; otherwise the end of the queue, and for POP
        the last message (RocketMQ pops "the last one" there).
        """
        if config.consume_from_where == "first_offset":
            return self._store.min_offset(topic, queue_id)
        if config.consume_from_where == "timestamp":
            return self._store.offset_for_timestamp(topic, queue_id, config.consume_timestamp_ms)
        if self.starts_in_memory(topic, queue_id):
            return 0
        end = self._store.max_offset(topic, queue_id)
        return max(end - 1, 0) if pop else end

    def starts_in_memory(self, topic: str, queue_id: int) -> bool:
        """The queue still starts at offset 0 and that message is in memory (RocketMQ
        answers a group without an offset there with 0: ``ConsumerManageProcessor``,
        POP's ``initPopOffsetByCheckMsgInMem``)."""
        return self._store.min_offset(topic, queue_id) <= 0 and self._store.in_memory(
            topic, queue_id, 0
        )

    def pop_initial_offset(self, state_group: str, topic: str, queue_id: int) -> int:
        """Where POP starts in a queue the group never committed in: the first offset
        for retry topics and auto-created groups, else the group's consume-from setting."""
        config = self._groups.get(base_group(state_group))
        if is_retry_topic(topic) or config is None or config.auto_created:
            return self._store.min_offset(topic, queue_id)
        return self.configured_start(config, topic, queue_id, pop=True)

    def members(self, group: str) -> list[str]:
        """The broadcast member names of ``group`` that have stored offsets."""
        return [g for g in self._offsets.groups() if g != group and base_group(g) == group]

    def slowest(self, group: str) -> dict[tuple[str, int], int]:
        """{(topic, queue id): lowest offset} over the broadcasting group's live clients
        (over every stored client when none is live); {} when it has none."""
        live = {broadcast_member(group, cid) for cid in self._clients.consumers(group)}
        members = self.members(group)
        slowest: dict[tuple[str, int], int] = {}
        for member in [m for m in members if m in live] or members:
            for key, offset in self._offsets.queues_of(member).items():
                slowest[key] = min(slowest.get(key, offset), offset)
        return slowest
