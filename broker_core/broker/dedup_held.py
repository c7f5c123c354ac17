"""The ids the dedup window holds, in its two lanes, and when it forgets them
(``dedup_window``).

* **runs** (:class:`~.dedup_runs.Runs`): batches of one client's rising ids, 16 bytes an
  id;
* **the dict**: every other id, a 64-bit hash of (topic, id) (Python's string hash,
  salted per process) to its unit's commitlog offset, about 120 bytes an id. Beside it,
  per run key, how many of its ids have a number and the lowest and highest
  (``dict_spans``), so that a run claim looks in the dict only when it may hold one of
  the run's numbers.

Ids are filed in generations, a sixteenth of ``max_ids`` each (or of the window's
length, whichever fills first), and forgotten a generation at a time: the oldest once
the count passes ``max_ids`` or its newest id is older than ``window_ms``.

Threads: none of its own; the window calls it under its lock.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from broker_core.broker.dedup_runs import Bounds, Run, RunKey, Runs, Span

GENERATIONS = 16  # the count bound forgets in steps of max_ids / this


@dataclass(slots=True, eq=False)
class _Generation:
    """Ids filed together, forgotten together."""

    first_ms: int = 0
    newest_ms: int = 0
    size: int = 0
    keys: list[int] = field(default_factory=list)  # the dict's
    counts: list[tuple[RunKey, int]] = field(default_factory=list)  # their numbers per run key
    runs: list[Run] = field(default_factory=list)


class HeldIds:
    """The window's ids: the runs and the dict, in generations (module docstring)."""

    def __init__(self, *, window_ms: int, max_ids: int) -> None:
        self.window_ms = window_ms
        self.max_ids = max_ids
        self.step = max(1, max_ids // GENERATIONS)  # the most ids one generation holds
        self.ids: dict[int, int] = {}  # the dict: key -> commitlog offset
        self.dict_spans: dict[RunKey, list[int]] = {}  # [how many, lowest, highest]
        self.runs = Runs()
        self._generations: deque[_Generation] = deque()
        self._current = _Generation()
        self._sealed = 0  # ids in sealed generations

    def clear(self) -> None:
        self.ids.clear()
        self.dict_spans.clear()
        self.runs.clear()
        self._generations.clear()
        self._current, self._sealed = _Generation(), 0

    def dict_may_hold(self, span: Span) -> bool:
        """Whether the dict may hold one of ``span``'s numbers."""
        return within(self.dict_spans.get(span.key), span)

    def hold_run(self, span: Span, offsets: np.ndarray, now_ms: int) -> bool:
        """Hold ``span`` (of at most :meth:`step` numbers) stored at ``offsets`` as a run;
        False (not held) when it overlaps a held run of its key."""
        run = self.runs.add(span, offsets)
        if run is None:
            return False
        self._file(len(span.numbers), now_ms, run=run)
        return True

    def hold_keys(self, keys: list[int], offsets: list[int], bounds: Bounds, now_ms: int) -> None:
        """Put stored ids in the dict and file them (``bounds``: their numbers)."""
        self.ids.update(zip(keys, offsets, strict=True))
        spans = self.dict_spans
        for runkey, (count, lo, hi) in bounds.items():
            span = spans.get(runkey)
            if span is None:
                spans[runkey] = [count, lo, hi]
            else:
                span[0], span[1], span[2] = span[0] + count, min(span[1], lo), max(span[2], hi)
        counts = [(runkey, count) for runkey, (count, _, _) in bounds.items()]
        step = self.step
        for at in range(0, len(keys), step):
            last = at + step >= len(keys)  # the counts go last: forgotten after their ids
            part = keys if len(keys) <= step else keys[at : at + step]
            self._file(len(part), now_ms, keys=part, counts=counts if last else ())

    def _file(
        self,
        size: int,
        now_ms: int,
        *,
        keys: Sequence[int] = (),
        counts: Sequence[tuple[RunKey, int]] = (),
        run: Run | None = None,
    ) -> None:
        """File stored ids in the current generation (sealing it first when full or aged),
        then forget the generations beyond the bounds."""
        gen = self._current
        if gen.size and (
            gen.size >= self.step or now_ms - gen.first_ms >= self.window_ms // GENERATIONS
        ):
            self._generations.append(gen)
            self._sealed += gen.size
            self._current = gen = _Generation()
        if not gen.size:
            gen.first_ms = now_ms
        gen.size += size
        gen.newest_ms = now_ms
        gen.keys.extend(keys)
        gen.counts.extend(counts)
        if run is not None:
            gen.runs.append(run)
        self.forget(now_ms)

    def forget(self, now_ms: int) -> None:
        """Forget the oldest generations while beyond the count or older than the window."""
        gens, ids = self._generations, self.ids
        while gens and (
            self._sealed + self._current.size > self.max_ids
            or gens[0].newest_ms < now_ms - self.window_ms
        ):
            old = gens.popleft()
            self._sealed -= old.size
            deque(map(ids.pop, old.keys, repeat(None)), maxlen=0)  # pops in C
            for runkey, count in old.counts:
                span = self.dict_spans[runkey]
                span[0] -= count
                if span[0] <= 0:  # none left: its range starts afresh
                    del self.dict_spans[runkey]
            if old.runs:
                self.runs.drop(old.runs)

    def size(self) -> int:
        """Message ids held now."""
        return len(self.ids) + self.runs.ids

    def memory_bytes(self) -> int:
        """An estimate of the memory: the dict, its int objects, the key lists, the runs."""
        gens = [*self._generations, self._current]
        lists = sum(sys.getsizeof(g.keys) + sys.getsizeof(g.runs) for g in gens)
        dict_bytes = sys.getsizeof(self.ids) + 64 * len(self.ids)
        return dict_bytes + lists + self.runs.nbytes()


def within(span: Sequence[int] | None, other: Span) -> bool:
    """Whether [count, lowest, highest] ``span`` (None: nothing) may hold numbers of
    ``other``."""
    return span is not None and span[1] <= other.hi and other.lo <= span[2]
