"""The dedup window: recent message ids per topic and where their units lie (``dedup``).

Two lanes hold the ids (:mod:`.dedup_held`):

* **runs**. A batch of one client's rising ids is one span. Every official client's
  batches are (:mod:`.dedup_runs`). A span is held as one run: 16 bytes an id, and one
  bisect to check a batch.
* **the dict**. Every other id: single sends, ids of other shapes, and a batch whose
  range overlaps a held run. About 120 bytes an id.

A send is checked against both lanes. A run claim (:meth:`SendWindow.claim_columns` of
a span) looks in the dict only when the dict may hold one of its numbers. A dict claim
looks each id's number up in the runs only when its run key holds runs.

Crash contract. Nothing is written. The window lives in memory and is rebuilt from the
commitlog, the only truth, by :meth:`SendWindow.rebuild`. That happens when the broker
starts and when a slave is promoted (its log holds the master's bytes at the same
offsets). So a restart or a failover still answers a retry of a send stored just before
it. The rebuild gathers consecutive units of one client's rising ids back into runs.
The window is per broker group: a retry that a client routes to another broker group is
not caught. Ids older than the window (by store time) or beyond ``dedup_max_ids`` are
forgotten, a generation at a time.

Concurrency. A send claims its ids under the window's lock before it stores. An id that
another call is storing is *in flight*: that call's claim holds it, apart from the
window. The second call waits for it to settle (BusyError, retriable, if it does not
within :data:`PENDING_WAIT_S`), so two concurrent sends of one id store it once.
Threads: every method may be called from any thread.

Memory: :meth:`SendWindow.memory_bytes`, in ``/metrics``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from broker_core.broker.dedup_held import HeldIds, within
from broker_core.broker.dedup_log import (
    deduplicated,
    original_result,
    readable_units,
    send_key,
    unit_send,
    window_start,
)
from broker_core.broker.dedup_runs import (
    MIN_ROWS,
    Bounds,
    Gathered,
    RunKey,
    Span,
    holds,
    id_number,
    number_bounds,
    overlap,
    span_of,
    span_of_text,
)
from broker_core.broker.sending import SendResult
from broker_core.errors import BusyError, RocketMQError
from broker_core.message import StoredMessage
from broker_core.store.commitlog import CommitLog

# The window's own CPU (``cpu_s``) is timed on one send in this many: the thread's CPU
# clock is a system call, and reading it four times a send cost an eighth of that work.
CPU_SAMPLE = 8
PENDING_WAIT_S = 10.0  # longest a repeat waits for the first send of its id to settle
_REBUILD_RUN = 4096  # the longest run a rebuild gathers


def _key(topic: str, uniq: str) -> int:
    return hash(uniq) ^ hash(topic)


@dataclass(slots=True, eq=False)
class Claim:
    """What :meth:`SendWindow.claim` found for each row of a send.

    ``rows[i]`` is None for a row to store (its id reserved, or no id), else the
    commitlog offset of the original unit (>= 0), or ``-2 - j`` when row ``j`` of the
    same send is its first occurrence. A fresh run claim leaves ``rows`` empty (every row
    is to be stored).
    """

    topics: Sequence[str]  # each row's; a column claim: its one topic, once
    ids: Sequence[str | None] | None  # each row's id (a run claim: None, see index_keys)
    rows: list[int | None] = field(default_factory=list)
    fresh: bool = True  # every row is to be stored (the usual case)
    span: Span | None = None  # a run claim: its ids as one client's numbers
    index_keys: list[list[str]] | None = None  # a run claim: each row's, id first
    keys: list[int | None] | None = None  # each row's dict key (a run claim: when needed)
    reserved: dict[int, None] | None = None  # a dict claim: the keys it holds in flight
    bounds: Bounds | None = None  # a dict claim: its ids' numbers (``number_bounds``)
    numbers: np.ndarray | None = None  # a run claim: the numbers it holds in flight
    token: int = 0  # its place in the window's in-flight claims
    cpu: float = -1.0  # the CPU seconds the claim took; -1: not timed (``SendWindow.cpu_s``)

    def topic(self, row: int) -> str:
        return self.topics[0] if len(self.topics) == 1 else self.topics[row]

    def id_list(self) -> Sequence[str | None]:
        if self.ids is None:
            assert self.index_keys is not None
            self.ids = [keys[0] for keys in self.index_keys]
        return self.ids


class SendWindow:
    """The recent message ids per topic and where their units lie (module docstring)."""

    def __init__(
        self,
        *,
        window_ms: int,
        max_ids: int,
        read_unit: Callable[[int], StoredMessage],
        clock_ms: Callable[[], int],
        topic_dedup: Callable[[str], bool] = lambda topic: True,
    ) -> None:
        self._topic_dedup = topic_dedup  # a topic's own switch (attribute ``dedup``)
        self._counted: dict[str, bool] = {}  # whether each topic seen is deduplicated
        self._held = HeldIds(window_ms=window_ms, max_ids=max_ids)
        self.enabled = window_ms > 0 and max_ids > 0  # read on every send: an attribute
        self._read_unit = read_unit
        self._clock_ms = clock_ms
        self._inflight: dict[int, Claim] = {}  # by token: few, small
        self._tokens = 0
        self._lock = threading.Lock()  # a C lock: ``with`` on a Condition runs Python code
        self._settled = threading.Condition(self._lock)  # a claim left the in-flight table
        self._waiters = 0
        self.repeats = 0  # sends answered from the window since start
        # CPU seconds of the window's own work on the send path (claims and settles; one
        # send in CPU_SAMPLE timed, counted that many times): rocketmq_dedup_cpu_seconds
        self.cpu_s = 0.0
        self._sends = itertools.count()

    @property
    def window_ms(self) -> int:
        return self._held.window_ms

    @window_ms.setter
    def window_ms(self, window_ms: int) -> None:
        """A new length (``Broker.resize_dedup_window``: a rebuild follows)."""
        self._held.window_ms = window_ms
        self.enabled = window_ms > 0 and self.max_ids > 0

    @property
    def max_ids(self) -> int:
        return self._held.max_ids

    def counts(self, topic: str) -> bool:
        """Whether sends to ``topic`` are deduplicated: not a retry, DLQ or system topic,
        and not switched off by its attribute (kept per topic until the topics change)."""
        table = self._counted  # a change meanwhile drops this table, and what it learnt
        counted = table.get(topic)
        if counted is None:
            counted = table[topic] = deduplicated(topic) and self._topic_dedup(topic)
        return counted

    def topics_changed(self) -> None:
        """A topic was created, changed or deleted: its attribute is read again."""
        self._counted = {}

    def keys(self, topics: Sequence[str], ids: Sequence[str | None]) -> list[int | None]:
        """Each row's dict key: None where the topic is not deduplicated or there is no id."""
        salts: dict[str, int | None] = {}
        keys: list[int | None] = []
        for topic, uniq in zip(topics, ids, strict=True):
            if topic not in salts:
                salts[topic] = hash(topic) if self.counts(topic) else None
            salt = salts[topic]
            keys.append(None if salt is None or not uniq else hash(uniq) ^ salt)
        return keys

    # ---- the send path ------------------------------------------------------------------

    def _cpu_start(self) -> float:
        """The thread's CPU clock for one send in :data:`CPU_SAMPLE`; -1 for the others."""
        return time.thread_time() if next(self._sends) % CPU_SAMPLE == 0 else -1.0

    def claim(self, topics: Sequence[str], ids: Sequence[str | None]) -> Claim:
        """Find each row's original (a repeat) or reserve its id (to be stored)."""
        started = self._cpu_start()
        keys = self.keys(topics, ids)
        counted = ids
        if None in keys:  # rows that are not deduplicated have no number that counts
            counted = [u if k is not None else None for u, k in zip(ids, keys, strict=True)]
        bounds = number_bounds(topics, counted)
        return self._wait(Claim(topics, ids, keys=keys, bounds=bounds), started)

    def claim_columns(
        self, topic: str, index_keys: list[list[str]], id_text: str | None = None
    ) -> Claim | None:
        """:meth:`claim` of a one-topic batch whose every row's first index key is its
        id (a column batch's; ``id_text``: its ids as a bulk frame's properties, one
        string): a run claim when they are one span. None when the topic is not
        deduplicated."""
        if not self.counts(topic):
            return None
        started = self._cpu_start()
        if id_text is not None:
            span = span_of_text(topic, id_text, len(index_keys))
        elif len(index_keys) >= MIN_ROWS:
            span = span_of(topic, [keys[0] for keys in index_keys])
        else:
            span = None
        if span is not None:
            return self._wait(Claim([topic], None, span=span, index_keys=index_keys), started)
        ids = [keys[0] for keys in index_keys]
        salt = hash(topic)  # the ids hashed in C (map), the topic mixed in
        keys: list[int | None] = [h ^ salt for h in map(hash, ids)]
        claim = Claim([topic], ids, keys=keys, bounds=number_bounds([topic], ids))
        return self._wait(claim, started)

    def _wait(self, claim: Claim, started: float) -> Claim:
        deadline = 0.0
        with self._lock:
            while True:
                if claim.span is not None and self._claim_span_locked(claim):
                    break
                if claim.span is None and self._claim_dict_locked(claim):
                    break
                deadline = deadline or time.monotonic() + PENDING_WAIT_S
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BusyError("a send of the same message id is still being stored")
                self._waiters += 1
                try:
                    self._settled.wait(remaining)
                finally:
                    self._waiters -= 1
            self._tokens += 1
            claim.token = self._tokens
            self._inflight[claim.token] = claim
            if started >= 0:
                claim.cpu = time.thread_time() - started
            return claim

    def _claim_dict_locked(self, claim: Claim) -> bool:
        """Fill ``claim.rows``; False when another send is storing one of its ids."""
        keys = claim.keys
        assert keys is not None
        both = dict.fromkeys(keys)  # also tells whether a key repeats in the send
        both.pop(None, None)
        mine = cast("dict[int, None]", both)
        for other in self._inflight.values():
            if other.reserved is not None and not other.reserved.keys().isdisjoint(mine):
                return False
        numbered = self._numbered_locked(claim)  # rows whose run key holds runs or is in flight
        if numbered and any(
            _in_flight(other, runkey, number)
            for runkey, number in numbered.values()
            for other in self._inflight.values()
        ):
            return False
        ids = self._held.ids
        if len(mine) == len(keys) and not numbered and ids.keys().isdisjoint(mine):
            claim.rows, claim.fresh, claim.reserved = [None] * len(keys), True, mine
            return True
        rows: list[int | None] = [None] * len(keys)
        first: dict[int, int] = {}
        for row, key in enumerate(keys):
            if key is None:
                continue
            at = first.setdefault(key, row)
            found = -2 - at if at != row else ids.get(key)
            if found is None and row in numbered:
                found = self._held.runs.find_one(*numbered[row])
            if found is not None:
                rows[row] = found
                if found >= 0:  # stored before: not held in flight
                    mine.pop(key, None)
        claim.rows, claim.reserved = rows, mine
        claim.fresh = len(mine) == len(keys)
        return True

    def _numbered_locked(self, claim: Claim) -> dict[int, tuple[RunKey, int]]:
        """The (run key, number) of each row whose run key has runs held or a run claim
        in flight (only those can be in a run); usually none, found without a loop."""
        flying = {c.span.key for c in self._inflight.values() if c.span is not None}
        held = self._held.runs.keys()
        wanted = {k for k in claim.bounds or () if k in held or k in flying}
        if not wanted:
            return {}
        ids, keys = claim.id_list(), claim.keys
        assert keys is not None
        numbered = {}
        for row, uniq in enumerate(ids):
            if uniq and keys[row] is not None:
                form = id_number(claim.topic(row), uniq)
                if form is not None and form[0] in wanted:
                    numbered[row] = form
        return numbered

    def _claim_span_locked(self, claim: Claim) -> bool:
        """Fill ``claim.rows`` of a run claim; False when another send is storing one of
        its ids."""
        span = claim.span
        assert span is not None
        for other in self._inflight.values():
            if other.span is not None and other.numbers is not None:
                if (
                    other.span.key == span.key
                    and other.span.lo <= span.hi
                    and span.lo <= other.span.hi
                    and overlap(other.numbers, span.numbers)
                ):
                    return False
            elif (
                other.reserved
                and other.bounds
                and within(other.bounds.get(span.key), span)
                and not other.reserved.keys().isdisjoint(self._span_keys(claim))
            ):
                return False
        found = self._held.runs.find(span)
        if self._held.dict_may_hold(span):
            ids = self._held.ids
            in_dict = [ids.get(k, -1) for k in self._span_keys(claim)]  # type: ignore[arg-type]
            found = np.maximum(found, in_dict) if found is not None else np.array(in_dict)
        if found is None or not (found >= 0).any():
            claim.fresh, claim.numbers = True, span.numbers  # rows stay []: all to store
            return True
        claim.rows = [None if o < 0 else o for o in found.tolist()]
        claim.fresh, claim.numbers = False, span.numbers[found < 0]
        return True

    def _span_keys(self, claim: Claim) -> list[int | None]:
        """A run claim's dict keys, made when first needed."""
        if claim.keys is None:
            salt = hash(claim.topics[0])
            claim.keys = [hash(uniq) ^ salt for uniq in claim.id_list()]
        return claim.keys

    def _release_locked(self, claim: Claim) -> None:
        self._inflight.pop(claim.token, None)
        if self._waiters:
            self._settled.notify_all()

    def settle(self, claim: Claim, offsets: Sequence[int] | np.ndarray) -> None:
        """The rows to store (``rows`` None) were stored at ``offsets``, in order."""
        started = time.thread_time() if claim.cpu >= 0 else -1.0
        with self._lock:
            now = self._clock_ms()
            if claim.span is not None:
                self._settle_span_locked(claim, np.asarray(offsets, np.int64), now)
            else:
                self._settle_dict_locked(claim, offsets, now)
            self._release_locked(claim)
            if started >= 0:
                self.cpu_s += (claim.cpu + time.thread_time() - started) * CPU_SAMPLE

    def _settle_span_locked(self, claim: Claim, offsets: np.ndarray, now: int) -> None:
        span = claim.span
        assert span is not None
        step = self._held.step
        if claim.fresh and len(span.numbers) <= step and self._held.hold_run(span, offsets, now):
            return  # the usual case
        stored = None if claim.fresh else np.array([r is None for r in claim.rows])
        numbers = span.numbers if stored is None else span.numbers[stored]
        for at in range(0, len(numbers), step):
            part = Span.of(span.key, numbers[at : at + step])
            if self._held.hold_run(part, offsets[at : at + step], now):
                continue
            keys = self._span_keys(claim)  # overlapping a run: held in the dict
            if stored is not None:
                keys = [k for k, s in zip(keys, stored.tolist(), strict=True) if s]
            part_keys = keys[at : at + step]
            bounds = {span.key: (len(part_keys), part.lo, part.hi)}
            self._held.hold_keys(part_keys, offsets[at : at + step].tolist(), bounds, now)  # type: ignore[arg-type]

    def _settle_dict_locked(
        self, claim: Claim, offsets: Sequence[int] | np.ndarray, now: int
    ) -> None:
        keys = claim.keys
        assert keys is not None
        if isinstance(offsets, np.ndarray):
            offsets = offsets.tolist()
        bounds = claim.bounds or {}  # of every row: the dict's counts stay an upper bound
        if claim.fresh:
            self._held.hold_keys(keys, offsets, bounds, now)  # type: ignore[arg-type]
            return
        todo = [r for r, found in enumerate(claim.rows) if found is None]
        held = [(r, o) for r, o in zip(todo, offsets, strict=True) if keys[r] is not None]
        self._held.hold_keys(
            [keys[r] for r, _ in held],  # type: ignore[misc]
            [o for _, o in held],
            bounds,
            now,
        )

    def abandon(self, claim: Claim) -> None:
        """The send failed: its reservations are dropped (a retry stores it)."""
        with self._lock:
            self._release_locked(claim)
            if claim.cpu >= 0:
                self.cpu_s += claim.cpu * CPU_SAMPLE

    def original(self, offset: int, topic: str, uniq: str) -> SendResult | None:
        """The first send's result, read from its unit; None when that unit is gone or
        is not a send of (``topic``, ``uniq``) (a hash collision, or two ids of one
        number: ``dedup_runs``)."""
        try:
            stored = self._read_unit(offset)
        except RocketMQError:
            return None
        if send_key(stored) != (topic, uniq):
            return None
        return original_result(stored)

    # ---- bounds and rebuild ---------------------------------------------------------------

    def rebuild(self, commitlog: CommitLog) -> int:
        """Refill the window from the units stored within it (at start and promotion);
        returns how many sends it now holds."""
        now = self._clock_ms()
        self.topics_changed()  # a promoted slave's table came from its master
        with self._lock:
            self._held.clear()
            if not self.enabled:
                return 0
            since = now - self.window_ms
            start = window_start(commitlog, since)
            gathered = Gathered()
            counted: dict[str, bool] = {}  # each topic's own switch, read once
            for buf, pos, phys in readable_units(commitlog, start, commitlog.max_offset):
                found = unit_send(buf, pos, since)
                if found is None:
                    continue
                topic, uniq, store_ms = found
                if not counted.setdefault(topic, self._topic_dedup(topic)):
                    continue
                form = id_number(topic, uniq)
                if not gathered.extends(form, _REBUILD_RUN) or self._jumps_locked(gathered, form):
                    self._hold_gathered_locked(gathered)
                if self._holds_locked(topic, uniq, form):
                    continue  # the first unit of a send is its original
                if form is not None:
                    gathered.add(form, uniq, phys, store_ms)
                else:
                    self._held.hold_keys([_key(topic, uniq)], [phys], {}, store_ms)
            self._hold_gathered_locked(gathered)
            self._held.forget(now)
            return self.size()

    def _jumps_locked(self, gathered: Gathered, form: tuple[RunKey, int] | None) -> bool:
        """Whether ``form`` would make the gathered run jump over a held run (a run of
        the same client stored between, e.g. batches appended out of their ids' order):
        the run would overlap it and be refused."""
        if gathered.key is None or form is None:
            return False
        above = self._held.runs.first_above(gathered.key, gathered.numbers[-1])
        return above is not None and above < form[1]

    def _holds_locked(self, topic: str, uniq: str, form: tuple[RunKey, int] | None) -> bool:
        if form is not None and self._held.runs.find_one(*form) is not None:
            return True
        return _key(topic, uniq) in self._held.ids

    def _hold_gathered_locked(self, gathered: Gathered) -> None:
        """Hold a rebuild's gathered units: as a run, or in the dict when too few or
        overlapping a run."""
        if gathered.key is None:
            return
        key, numbers, offsets = gathered.key, gathered.numbers, gathered.offsets
        as_run = len(numbers) >= MIN_ROWS and self._held.hold_run(
            Span.of(key, np.array(numbers, np.uint64)),
            np.array(offsets, np.int64),
            gathered.store_ms,
        )
        if not as_run:
            keys = [_key(key[0], uniq) for uniq in gathered.ids]
            bounds = {key: (len(keys), numbers[0], numbers[-1])}
            self._held.hold_keys(keys, offsets, bounds, gathered.store_ms)
        gathered.clear()

    def size(self) -> int:
        """Message ids held now."""
        return self._held.size()

    def memory_bytes(self) -> int:
        """An estimate of the window's memory (``HeldIds.memory_bytes``)."""
        with self._lock:
            return self._held.memory_bytes()


def _in_flight(claim: Claim, runkey: RunKey, number: int) -> bool:
    """Whether run claim ``claim`` holds (``runkey``, ``number``) in flight."""
    span, numbers = claim.span, claim.numbers
    return (
        span is not None and numbers is not None and span.key == runkey and holds(numbers, number)
    )
