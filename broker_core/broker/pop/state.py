"""POP in-flight state: the table of deliveries, rebuilt from the revive log on open.

Per (group, queue topic, queue id) a :class:`QueueState` holds the scan frontier, the
deliveries in flight, FIFO messages withheld behind a busy message group, and (after a
restart) offsets known done ahead of the frontier. :class:`PopState` adds a heap of
invisible deadlines (``pop_due`` never scans every entry) and the *anchors* that bound
how far back a replay must start.

**Recovery.** The service commits, per queue, the *consume offset* ``C`` (lowest offset
in flight, withheld or not yet scanned) and then the *replay start* ``R`` (least anchor
of everything live) to the ConsumerOffsetManager. Both only grow and ``C`` is committed
first, so a persisted snapshot never pairs a ``C`` with a larger ``R`` than belongs to
it. The invariant: for every offset at or above ``C`` that was taken, the records that
tell its fate (its last CHECKPOINT while in flight, or the resolution that ended it)
are at or after ``R``. It holds because an offset's anchor is the revive-log end when
it was first scanned and scans move forward, except in the region a restart rescans,
where :meth:`QueueState.anchor_for` uses an older anchor. :meth:`PopState.apply`
replays records from ``R``: CHECKPOINTs rebuild in-flight entries (attempt counts and
handle versions included), resolutions end them, and offsets resolved at or above ``C``
go to ``skip`` so the rescan from ``C`` neither loses an un-acked message nor redelivers
an acked one; records below ``C`` are ignored. A RESET record (an offset reset) drops
what came before it for its queue and restarts the queue at its offset (or at ``C``
when that is higher: committed after the reset). FIFO withheld messages are not
recorded: the rescan finds them again. Memory is bounded by what is in flight, the FIFO
look-ahead window, and (after a restart, until the rescan passes them) the skip set.

Threads: no locking here; the POP service calls it under its own lock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.broker.pop.log import PopRecord, QueueKey, RecordKind


@dataclass(slots=True)
class InFlight:
    """One message handed to a consumer and not yet acked."""

    key: QueueKey
    offset: int
    version: int  # revive offset of the current CHECKPOINT; must match the handle
    anchor: int
    pop_time_ms: int
    invisible_ms: int
    attempt: int
    message_group: str = ""
    expired: bool = False  # FIFO only: invisible time ended, visible again in place

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    def checkpoint(self) -> PopRecord:
        """The CHECKPOINT record that starts this delivery (its revive offset is ``version``)."""
        group, topic, qid = self.key
        return PopRecord(
            RecordKind.CHECKPOINT,
            group,
            topic,
            qid,
            self.offset,
            anchor=self.anchor,
            time_ms=self.pop_time_ms,
            invisible_ms=self.invisible_ms,
            attempt=self.attempt,
            message_group=self.message_group,
        )


@dataclass(slots=True)
class Withheld:
    """A FIFO message scanned past because its message group was busy."""

    anchor: int
    message_group: str


@dataclass(slots=True)
class QueueState:
    """What one group has popped from one queue.

    ``popped_to`` is the scan frontier; below it every offset is in flight, withheld,
    or done. ``skip`` holds done offsets at or above ``popped_to`` (learnt by replay).
    """

    key: QueueKey
    popped_to: int
    committed: int
    inflight: dict[int, InFlight] = field(default_factory=dict)
    withheld: dict[int, Withheld] = field(default_factory=dict)
    skip: dict[int, int] = field(default_factory=dict)  # offset -> pin: a revive offset at
    # or before the records proving it done
    expired: set[int] = field(default_factory=set)  # FIFO: in-flight offsets visible again
    busy_groups: dict[str, int] = field(default_factory=dict)  # FIFO: unexpired deliveries
    low_heap: list[int] = field(default_factory=list)  # over inflight ∪ withheld, lazy
    rescan_end: int = 0  # after a restart: below this, done offsets may still be ahead
    rescan_anchor: int = 0  # ... so what is newly scanned there is anchored no later

    def anchor_for(self, offset: int, fresh: int) -> int:
        """Anchor of an offset first scanned now, when the revive log ends at ``fresh``.

        Normally ``fresh``: everything taken above it was taken later. In the region a
        restart rescans, offsets above it were taken *earlier* (they are in ``skip`` or
        were replayed in flight), so it takes a replay position that still covers the
        records of their fate.
        """
        return min(fresh, self.rescan_anchor) if offset < self.rescan_end else fresh

    def consume_offset(self) -> int:
        """Lowest offset not yet done: everything below it may be forgotten."""
        low = self.low_heap
        while low and low[0] not in self.inflight and low[0] not in self.withheld:
            heapq.heappop(low)
        return min(low[0], self.popped_to) if low else self.popped_to

    def is_busy(self, message_group: str) -> bool:
        return bool(message_group) and self.busy_groups.get(message_group, 0) > 0

    def adjust_busy(self, message_group: str, delta: int) -> None:
        if message_group:
            count = self.busy_groups.get(message_group, 0) + delta
            if count > 0:
                self.busy_groups[message_group] = count
            else:
                self.busy_groups.pop(message_group, None)


class _Anchors:
    """A multiset of revive offsets with a cheap minimum (heap + counts, lazy deletion)."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._heap: list[int] = []

    def add(self, anchor: int) -> None:
        if anchor not in self._counts:
            heapq.heappush(self._heap, anchor)
        self._counts[anchor] = self._counts.get(anchor, 0) + 1

    def remove(self, anchor: int) -> None:
        left = self._counts[anchor] - 1
        if left:
            self._counts[anchor] = left
        else:
            del self._counts[anchor]

    def min(self, default: int) -> int:
        while self._heap and self._heap[0] not in self._counts:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else default


class PopState:
    """All queues' in-flight tables, the deadline heap and the anchors bounding replay."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self._anchors = _Anchors()
        self._deadlines: list[tuple[int, int, QueueKey, int]] = []  # (deadline, version, ...)
        self._live = 0

    def queue(self, key: QueueKey, start_offset: Callable[[], int]) -> QueueState:
        """The state of ``key``, created at ``start_offset()`` on first use."""
        qs = self.queues.get(key)
        if qs is None:
            start = start_offset()
            qs = self.queues[key] = QueueState(key, start, start)
        return qs

    def inflight_count(self) -> int:
        return self._live

    def replay_start(self, default: int) -> int:
        """The revive offset a replay after a crash now would have to start from."""
        return self._anchors.min(default)

    # ---- transitions -------------------------------------------------------------------

    def deliver(self, qs: QueueState, entry: InFlight) -> None:
        """Record a new delivery of ``entry.offset`` (first pop, retake, or replayed)."""
        old = qs.inflight.get(entry.offset)
        if old is not None:
            self._forget(qs, old)
        else:
            withheld = qs.withheld.pop(entry.offset, None)
            if withheld is not None:
                self._anchors.remove(withheld.anchor)
            else:
                heapq.heappush(qs.low_heap, entry.offset)
        qs.inflight[entry.offset] = entry
        self._anchors.add(entry.anchor)
        qs.adjust_busy(entry.message_group, 1)
        self._live += 1
        self._push_deadline(entry)

    def resolve(self, qs: QueueState, entry: InFlight) -> None:
        """The delivery ended for good (ack, retry copy, DLQ, gone).

        An offset the frontier has not passed yet (only after a restart, which rescans
        from the consume offset) goes to ``skip`` so the rescan does not deliver it again.
        """
        del qs.inflight[entry.offset]
        self._forget(qs, entry)
        if entry.offset >= qs.popped_to:
            qs.skip[entry.offset] = entry.version
            self._anchors.add(entry.version)

    def reset(self, key: QueueKey, offset: int) -> QueueState:
        """Forget everything about ``key`` and start it afresh at ``offset`` (an offset
        reset): its deliveries end without a record, their handles become stale."""
        old = self.queues.pop(key, None)
        if old is not None:
            for entry in old.inflight.values():
                self._forget(old, entry)
            for held in old.withheld.values():
                self._anchors.remove(held.anchor)
            for pin in old.skip.values():
                self._anchors.remove(pin)
        qs = self.queues[key] = QueueState(key, offset, offset)
        return qs

    def expire(self, qs: QueueState, entry: InFlight) -> None:
        """FIFO: the message is visible again in place; its group stops being busy."""
        entry.expired = True
        qs.expired.add(entry.offset)
        qs.adjust_busy(entry.message_group, -1)

    def withhold(self, qs: QueueState, offset: int, anchor: int, message_group: str) -> None:
        qs.withheld[offset] = Withheld(anchor, message_group)
        self._anchors.add(anchor)
        heapq.heappush(qs.low_heap, offset)

    def drop_withheld(self, qs: QueueState, offset: int) -> None:
        self._anchors.remove(qs.withheld.pop(offset).anchor)

    def pass_skip(self, qs: QueueState, offset: int) -> None:
        self._anchors.remove(qs.skip.pop(offset))

    def _forget(self, qs: QueueState, entry: InFlight) -> None:
        self._anchors.remove(entry.anchor)
        if entry.expired:
            qs.expired.discard(entry.offset)
        else:
            qs.adjust_busy(entry.message_group, -1)
        self._live -= 1

    # ---- deadlines ---------------------------------------------------------------------

    def _push_deadline(self, entry: InFlight) -> None:
        heapq.heappush(self._deadlines, (entry.deadline_ms, entry.version, entry.key, entry.offset))
        if len(self._deadlines) > 2 * self._live + 1024:
            self._deadlines = [
                (e.deadline_ms, e.version, e.key, e.offset)
                for qs in self.queues.values()
                for e in qs.inflight.values()
                if not e.expired
            ]
            heapq.heapify(self._deadlines)

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[QueueState, InFlight]]:
        """Up to ``limit`` current, unexpired deliveries whose deadline is ``<= now_ms``."""
        due: list[tuple[QueueState, InFlight]] = []
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms and len(due) < limit:
            _deadline, version, key, offset = heapq.heappop(heap)
            qs = self.queues.get(key)
            entry = qs.inflight.get(offset) if qs else None
            if qs and entry and entry.version == version and not entry.expired:
                due.append((qs, entry))
        return due

    def requeue(self, entry: InFlight) -> None:
        """Put a due delivery back on the heap (its revive failed; a later tick retries)."""
        self._push_deadline(entry)

    def next_deadline_ms(self) -> int | None:
        return self._deadlines[0][0] if self._deadlines else None

    # ---- replay --------------------------------------------------------------------------

    def finish_replay(self, log_end: int) -> None:
        """Mark each queue's rescan region (see :meth:`QueueState.anchor_for`).

        The region ends above the highest offset taken before the restart. Offsets done
        there are proved by records at or after their skip pin; those still in flight
        will be resolved by records at or after ``log_end``.
        """
        for qs in self.queues.values():
            taken = [*qs.skip, *qs.inflight]
            if taken:
                qs.rescan_end = max(taken) + 1
                qs.rescan_anchor = min([*qs.skip.values(), log_end])

    def apply(self, revive_offset: int, record: PopRecord, start_offset: Callable[[], int]) -> None:
        """Replay one record; ``start_offset`` gives a new queue's committed offset."""
        if record.kind is RecordKind.RESET:  # what was committed since counts from here on
            self.reset(record.key, max(record.queue_offset, start_offset()))
            return
        qs = self.queue(record.key, start_offset)
        if record.queue_offset < qs.popped_to:
            return  # resolved before the committed offset: nothing to rebuild
        if record.kind is RecordKind.CHECKPOINT:
            self.deliver(
                qs,
                InFlight(
                    record.key,
                    record.queue_offset,
                    revive_offset,
                    record.anchor,
                    record.time_ms,
                    record.invisible_ms,
                    record.attempt,
                    record.message_group,
                ),
            )
            return
        entry = qs.inflight.get(record.queue_offset)
        if entry is not None:
            if entry.version == record.resolves:
                self.resolve(qs, entry)
        elif record.queue_offset not in qs.skip:
            # A resolution alone proves the offset done: its checkpoint may predate the
            # replay start when the message was taken before an earlier restart.
            qs.skip[record.queue_offset] = revive_offset
            self._anchors.add(revive_offset)
