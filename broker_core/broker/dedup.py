"""Idempotent sends: a repeat of a recently stored message id is answered, not stored again.

Every official client keeps a message's id (``UNIQ_KEY``) across its retries, so a send
whose answer was lost (timeout, reset, a broker killed after the write) comes back with
the same id. :class:`SendWindow` remembers, per topic, the ids stored in a recent window
(``dedup_window_ms`` and at most ``dedup_max_ids`` ids) and where each unit lies in the
commitlog; :class:`DedupSender` (composed over the broker's ``Sender``) answers a repeat
with the **original** result — read back from the unit itself: same queue, offset and
message id (a transaction's id and half offset, a timer's recall handle) — and stores
only the rest. Batches are checked message by message; a repeat inside one batch is
answered with its first occurrence's result.

Which sends count. The key of a send is (the topic the producer named, its id). A held
message counts under its real topic: a half (``RMQ_SYS_TRANS_HALF_TOPIC``), a delay level
(``SCHEDULE_TOPIC_XXXX``) or a timer (``rmq_sys_wheel_timer``) is keyed by its
``REAL_TOPIC``, so a retried transactional, delayed or timed send is answered with its
first half or hold. Not deduplicated: sends to retry (``%RETRY%``), dead-letter
(``%DLQ%``) and system topics (a 4.x consumer's send-back re-sends the same id for every
round), and the broker's own re-puts — a committed half, a fired delay or timer, a POP
or send-back retry, a check-back copy — which never go through :class:`DedupSender`;
at a rebuild they are either skipped (a committed half, a check-back copy) or keep the
first entry of their key (a fired timer's copy comes after its hold). A deliberate
re-send needs a new id (``rmq`` and the DLQ replay job give one). A topic whose attribute
``dedup`` is ``false`` is not deduplicated (``topics.TopicConfig.dedup``).

The window, its crash contract, locking and memory: :mod:`.dedup_window`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from broker_core.broker.dedup_window import Claim, SendWindow
from broker_core.broker.sending import Sender, SendResult
from broker_core.broker.topics import TopicManager
from broker_core.config import BrokerConfig
from broker_core.message import PROPERTY_UNIQ_KEY, Message, StoredMessage
from broker_core.protocol import unit as layout
from broker_core.store.columns import ColumnBatch, join_units


class DedupSender:
    """The broker's ``Sender`` with a :class:`SendWindow` in front (same two methods)."""

    def __init__(self, sender: Sender, window: SendWindow) -> None:
        self.sender = sender
        self.window = window

    def send(
        self, messages: Sequence[Message], *, producer_group: str | None = None
    ) -> list[SendResult]:
        """:meth:`Sender.send`, each repeat answered with its original result."""
        window = self.window
        if not window.enabled or not messages:
            return self.sender.send(messages, producer_group=producer_group)
        topics = [m.topic for m in messages]
        if not any(map(window.counts, set(topics))):  # e.g. a topic with dedup=false
            return self.sender.send(messages, producer_group=producer_group)
        ids = [m.properties.get(PROPERTY_UNIQ_KEY) for m in messages]
        claim = window.claim(topics, ids)
        try:
            answers = self._originals(claim, topics, ids)
            todo = [m for m, answer in zip(messages, answers, strict=True) if answer is None]
            stored = self.sender.send(todo, producer_group=producer_group) if todo else []
        except BaseException:
            window.abandon(claim)
            raise
        window.settle(claim, [r.physical_offset for r in stored])
        fresh = iter(stored)
        results = [next(fresh) if answer is None else answer for answer in answers]
        return [results[r] if isinstance(r, int) else r for r in results]  # type: ignore[misc]

    def _originals(
        self, claim: Claim, topics: Sequence[str], ids: Sequence[str | None]
    ) -> list[SendResult | int | None]:
        """Per row: None (to store), the original's result, or the row index of its
        first occurrence in this send. A vanished original is stored again."""
        if claim.fresh:
            return [None] * len(ids)
        answers: list[SendResult | int | None] = []
        for row, found in enumerate(claim.rows):
            if found is None:
                answers.append(None)
            elif found < 0:
                answers.append(-2 - found)
            else:
                original = self.window.original(found, topics[row], ids[row] or "")
                if original is None:
                    claim.rows[row] = None  # store it again (settle records the new unit)
                else:
                    self.window.repeats += 1
                answers.append(original)
        return answers

    def send_columns(self, batch: ColumnBatch, *, queue_id: int | None = None) -> np.ndarray:
        """:meth:`Sender.send_columns`, each repeat answered with its original queue and
        offset: its row of ``batch.queue_ids`` and of the offsets returned."""
        window = self.window
        if not window.enabled:
            return self.sender.send_columns(batch, queue_id=queue_id)
        claim = window.claim_columns(batch.topic, batch.index_keys, batch.id_text)
        if claim is None:
            return self.sender.send_columns(batch, queue_id=queue_id)
        try:
            if claim.fresh:
                offsets = self.sender.send_columns(batch, queue_id=queue_id)
                stored = batch.physical_offsets.astype(np.int64)
            else:
                offsets, stored = self._send_rest(batch, claim, queue_id)
        except BaseException:
            window.abandon(claim)
            raise
        window.settle(claim, stored)
        return offsets

    def _send_rest(
        self, batch: ColumnBatch, claim: Claim, queue_id: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Store the rows that are no repeats; (every row's queue offset, the stored rows'
        commitlog offsets). Repeats get their original's queue id in ``batch``."""
        ids = [k[0] for k in batch.index_keys]
        answers = self._originals(claim, batch.topics, ids)
        todo = [row for row, answer in enumerate(answers) if answer is None]
        offsets = np.zeros(len(batch), np.int64)
        queues = batch.queue_ids.copy()
        stored = np.zeros(0, np.int64)
        if todo:
            rest = take_rows(batch, todo)
            offsets[todo] = self.sender.send_columns(rest, queue_id=queue_id)
            queues[todo] = rest.queue_ids
            stored = rest.physical_offsets.astype(np.int64)
        for row, answer in enumerate(answers):
            if isinstance(answer, SendResult):
                offsets[row], queues[row] = answer.queue_offset, answer.queue_id
            elif answer is not None:  # a repeat inside this batch: its first row's answer
                offsets[row], queues[row] = offsets[answer], queues[answer]
        batch.queue_ids = queues
        return offsets, stored


def take_rows(batch: ColumnBatch, rows: list[int]) -> ColumnBatch:
    """A new batch of ``batch``'s ``rows`` (not yet stored), in order."""
    head = batch.head[rows].copy()
    raw = head.view(np.uint8).data
    starts, sizes = batch.starts, batch.sizes
    size = layout.HEADER_SIZE
    bodies_tails = [
        bytes(batch.units[int(starts[r]) + size : int(starts[r]) + int(sizes[r])]) for r in rows
    ]
    units = join_units(raw, bodies_tails, [b""] * len(rows))
    part = ColumnBatch(
        head,
        raw,
        units,
        None,
        [batch.topics[r] for r in rows],
        [batch.index_keys[r] for r in rows],
    )
    if batch.tail_crcs is not None:
        part.tail_crcs = [batch.tail_crcs[r] for r in rows]
    return part


def with_dedup(
    sender: Sender,
    config: BrokerConfig,
    read_unit: Callable[[int], StoredMessage],
    clock_ms: Callable[[], int],
    topics: TopicManager,
) -> DedupSender:
    """``sender`` behind a :class:`SendWindow` of the config's bounds (0: off), which
    reads each topic's own switch from ``topics`` (``TopicConfig.dedup``)."""
    window = SendWindow(
        window_ms=config.dedup_window_ms,
        max_ids=config.dedup_max_ids,
        read_unit=read_unit,
        clock_ms=clock_ms,
        topic_dedup=topics.dedup,
    )
    topics.add_listener(window.topics_changed)
    return DedupSender(sender, window)
