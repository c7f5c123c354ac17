"""Choosing what one POP receive takes from one queue, without changing any state.

:meth:`QueueScanner.plan` reads the store and returns a :class:`QueuePlan`: the messages
to deliver, how far the scan frontier moves, which FIFO messages are held back, and which
in-flight offsets turned out to be gone (below the queue's retained minimum). The POP
service writes the plan's checkpoints to the revive log first and only then calls
:meth:`QueueScanner.apply`, so a failed append leaves the in-memory state untouched.

Order of candidates in a queue: for FIFO groups, first the offsets already known and
visible again (expired deliveries and withheld messages) in offset order, then new
messages from the frontier. A message whose FIFO message group is busy (a delivery of
that group is in flight, or one was picked earlier in this plan) is withheld, which
keeps each message group's order; messages without a message group never wait.
Offsets already in flight or known done (``skip``, after a restart) are passed over.
Rejected by the filter means consumed: the frontier moves past it and nothing is kept.

Threads: called by the POP service under its lock; reads the store only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from broker_core.broker.lite import PROPERTY_LITE_TOPIC
from broker_core.broker.pop.policy import delivered_topic, delivery_attempt
from broker_core.broker.pop.state import InFlight, PopState, QueueState
from broker_core.errors import CorruptionError
from broker_core.message import PROPERTY_MESSAGE_GROUP, StoredMessage
from broker_core.protocol.filters import MessageFilter
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead

log = logging.getLogger(__name__)

_FIFO_BATCH = 64  # FIFO reads ahead: withheld messages do not fill the budget
_MAX_SCAN_UNITS = 65_536  # per queue and receive, so a filtered backlog cannot stall a call


@dataclass(slots=True)
class Pick:
    """A message chosen for delivery, with what its checkpoint records."""

    message: StoredMessage
    topic: str  # the original topic (differs from the queue topic for retry copies)
    attempt: int
    anchor: int
    message_group: str


@dataclass(slots=True)
class QueuePlan:
    qs: QueueState
    anchor: int  # revive-log end when the scan began: the usual anchor of what it passes
    popped_to: int
    picks: list[Pick] = field(default_factory=list)
    withhold: dict[int, tuple[str, int]] = field(default_factory=dict)  # -> (group, anchor)
    dropped_withheld: list[int] = field(default_factory=list)
    gone: list[InFlight] = field(default_factory=list)  # expired entries with no message
    taken_groups: set[str] = field(default_factory=set)

    def blocked(self, message_group: str) -> bool:
        return bool(message_group) and (
            self.qs.is_busy(message_group) or message_group in self.taken_groups
        )

    def take(self, pick: Pick) -> None:
        self.picks.append(pick)
        if pick.message_group:
            self.taken_groups.add(pick.message_group)


def _order_key(message: StoredMessage) -> str:
    """What a FIFO receive keeps in order: the message group, or a lite topic as a whole."""
    return message.properties.get(PROPERTY_MESSAGE_GROUP) or message.properties.get(
        PROPERTY_LITE_TOPIC, ""
    )


class QueueScanner:
    """Plans receives over ``store`` for the queues held in ``state``."""

    def __init__(self, store: MessageStore, state: PopState, max_withheld_per_queue: int):
        self._store = store
        self._state = state
        self._max_withheld = max_withheld_per_queue

    def plan(
        self, qs: QueueState, budget: int, flt: MessageFilter | None, anchor: int, *, fifo: bool
    ) -> QueuePlan:
        """Up to ``budget`` picks from ``qs``; ``flt`` None or ``*`` accepts everything."""
        plan = QueuePlan(qs, anchor, qs.popped_to)
        if fifo:
            self._retake(plan, budget)
        self._scan(plan, budget, None if flt is None or flt.match_all else flt, fifo)
        return plan

    def apply(self, plan: QueuePlan) -> None:
        """Move the frontier and record withheld messages (picks are delivered by the caller)."""
        qs = plan.qs
        for offset in plan.dropped_withheld:
            self._state.drop_withheld(qs, offset)
        qs.popped_to = plan.popped_to
        for offset in [o for o in qs.skip if o < qs.popped_to]:
            self._state.pass_skip(qs, offset)
        for offset, (message_group, anchor) in plan.withhold.items():
            self._state.withhold(qs, offset, anchor, message_group)
        if qs.popped_to >= qs.rescan_end:
            qs.rescan_end = 0

    def read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        """The message at ``offset``, or None when the store no longer (or never) had it."""
        store = self._store
        if not store.min_offset(topic, queue_id) <= offset < store.max_offset(topic, queue_id):
            return None
        try:
            got = store.get_messages(QueueRead(topic, queue_id, offset, 1))
        except CorruptionError as exc:
            log.error("POP %s:%d cannot redeliver offset %d: %s", topic, queue_id, offset, exc)
            return None
        return got.messages[0] if got.messages else None

    def _retake(self, plan: QueuePlan, budget: int) -> None:
        """FIFO: expired deliveries and withheld messages whose group is free, in order."""
        qs = plan.qs
        _group, topic, qid = qs.key
        for offset in sorted([*qs.expired, *qs.withheld]):
            if len(plan.picks) >= budget:
                return
            entry = qs.inflight.get(offset)
            held = qs.withheld.get(offset)
            message_group = entry.message_group if entry else held.message_group if held else ""
            if plan.blocked(message_group):
                continue
            message = self.read(topic, qid, offset)
            if message is None:
                if entry is not None:
                    plan.gone.append(entry)
                else:
                    plan.dropped_withheld.append(offset)
                continue
            attempt = entry.attempt + 1 if entry else delivery_attempt(message)
            anchor = entry.anchor if entry else held.anchor if held else plan.anchor
            topic_as = delivered_topic(topic, message)
            plan.take(Pick(message, topic_as, attempt, anchor, message_group))

    def _scan(self, plan: QueuePlan, budget: int, flt: MessageFilter | None, fifo: bool) -> None:
        """New messages from the frontier until the budget, the queue end or a limit."""
        _group, topic, qid = plan.qs.key
        lo, hi = self._store.min_offset(topic, qid), self._store.max_offset(topic, qid)
        pos = min(max(plan.popped_to, lo), hi)  # retention, or a tail lost in a crash
        scanned = 0
        while len(plan.picks) < budget and pos < hi and scanned < _MAX_SCAN_UNITS:
            want = budget - len(plan.picks)
            try:
                got = self._store.get_messages(
                    QueueRead(
                        topic,
                        qid,
                        pos,
                        max(want, _FIFO_BATCH) if fifo else want,
                        tag_filter=flt.matches_hash if flt else None,
                        message_filter=(lambda m: flt.matches(m.tag, m.properties))
                        if flt
                        else None,
                    )
                )
            except CorruptionError as exc:
                # The unit at pos does not verify: it can never be delivered. Step over it
                # (loudly) rather than stop every consumer of the group at it for good.
                log.error(
                    "POP %s:%d skips offset %d, which does not verify: %s", topic, qid, pos, exc
                )
                pos, scanned = pos + 1, scanned + 1
                continue
            scanned += got.scanned
            stop: int | None = None
            for message in got.messages:
                if len(plan.picks) >= budget or self._withheld_full(plan):
                    stop = message.queue_offset
                    break
                self._consider(plan, message, fifo)
            if stop is not None or got.next_offset <= pos:
                pos = pos if stop is None else stop
                break
            pos = got.next_offset
        plan.popped_to = pos

    def _consider(self, plan: QueuePlan, message: StoredMessage, fifo: bool) -> None:
        qs, offset = plan.qs, message.queue_offset
        if offset in qs.skip or offset in qs.inflight or offset in qs.withheld:
            return
        message_group = _order_key(message) if fifo else ""
        anchor = qs.anchor_for(offset, plan.anchor)
        if plan.blocked(message_group):
            plan.withhold[offset] = (message_group, anchor)
            return
        plan.take(
            Pick(
                message,
                delivered_topic(qs.key[1], message),
                delivery_attempt(message),
                anchor,
                message_group,
            )
        )

    def _withheld_full(self, plan: QueuePlan) -> bool:
        return len(plan.qs.withheld) + len(plan.withhold) >= self._max_withheld
