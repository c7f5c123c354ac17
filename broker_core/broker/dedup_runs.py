"""Runs: the dedup window's lane for batches of one client's rising message ids.

The official clients number their message ids: a fixed part (version, host, process)
followed by a rising part (time and a counter) in uppercase hex. RocketMQ 4.x's 32
characters end in 8 of time and 4 of counter; 5.x's 34 in 8 of seconds and 8 of
sequence; ours (``client/message_ids``) in 8 of milliseconds, one per batch, and 8 of
sequence. A client builds a batch in one go, so the batch's ids share everything but
their last :data:`TAIL` characters, and those rise. Their bytes, read as one big-endian
64-bit number (no hex decoding: the order of ASCII digits and capitals is their hex
order), are each id's *number*; the rest of the id is its run key's.

Such a batch (a :class:`Span`) is held as one :class:`Run`: its numbers (uint64,
rising) and its units' commitlog offsets (int64). That is 16 bytes an id and no Python
object per id. Checking a batch against its client's runs is one bisect, plus one
``searchsorted`` only where ranges overlap. The dict lane pays a lookup, an insert and
an eviction per id, in a table too large for the cache; this lane pays none of them.

The runs of one :data:`RunKey` (topic, the ids' part before their tail) never overlap.
:meth:`Runs.add` refuses a span that overlaps a held run (a client numbering several
batches at once, or a retry of part of a batch), and the window holds those ids in its
dict instead. Sorted by their first number, the runs are then also sorted by their
last, so the runs that can hold a number are found by bisection. An ASCII id of at
least :data:`TAIL` characters maps to exactly one (key, number) and back, whichever lane
reads it (:func:`span_of`, :func:`id_number`); a repeat found is confirmed against the
original unit's own id all the same (``SendWindow.original``).

Threads: none of its own; the window calls it under its lock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import KeysView, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from broker_core.protocol.property_codec import ID_HEAD

TAIL = 8  # an id's last characters, their bytes read as its number (big-endian: 64 bits)
MIN_ROWS = 16  # smaller batches go to the dict (a run costs ~200 bytes of its own)
RUN_BYTES = 200  # a run's own memory besides its arrays (object, arrays' headers)

RunKey = tuple[str, str]  # (topic, the ids' part before their tail)

_BEFORE_TAIL = itemgetter(slice(None, -TAIL))
_TAIL_OF = itemgetter(slice(-TAIL, None))


@dataclass(slots=True)
class Span:
    """A batch's ids read as one client's rising numbers (:func:`span_of`)."""

    key: RunKey
    numbers: np.ndarray  # uint64, strictly rising, one per row
    lo: int  # the first number
    hi: int  # the last

    @classmethod
    def of(cls, key: RunKey, numbers: np.ndarray) -> Span:
        """The span of rising ``numbers``."""
        return cls(key, numbers, int(numbers[0]), int(numbers[-1]))


def span_of(topic: str, ids: Sequence[str]) -> Span | None:
    """``ids`` as a :class:`Span`, or None when they are not one: fewer than
    :data:`MIN_ROWS`, not all of one length of at least :data:`TAIL`, not ASCII, parts
    before the tail that differ, or numbers that do not rise.
    Checked as arrays."""
    count = len(ids)
    if count < MIN_ROWS or len(set(map(len, ids))) != 1:
        return None
    try:
        raw = "".join(ids).encode("ascii")
    except UnicodeEncodeError:
        return None
    width = len(ids[0])
    return _span(topic, raw, count, width, 0, width)


def span_of_text(topic: str, id_text: str, count: int) -> Span | None:
    """:func:`span_of` of a bulk frame's ids, read from its properties as one ASCII
    string, each ``UNIQ_KEY 0x01 id 0x02`` of one length (``ColumnBatch.id_text``; its
    maker checked every row's head and separator, so only the ids are read here)."""
    if count < MIN_ROWS:
        return None
    row = len(id_text) // count
    return _span(topic, id_text.encode("ascii"), count, row, len(ID_HEAD), row - len(ID_HEAD) - 1)


def _span(topic: str, raw: bytes, count: int, row: int, start: int, width: int) -> Span | None:
    """The span of ``count`` ids of ``width`` bytes, each at ``start`` of a row of
    ``row`` bytes of ``raw``. The tails are read through a strided view, and the parts
    before them are copied out as one string and compared with row 0's repeated.

    Each step is the cheapest numpy form measured. None copies into a strided view:
    that releases the GIL, and a send thread that lets it go waits for it behind the
    others."""
    at = start + width - TAIL  # where each row's tail starts
    if at < start or count * row != len(raw):
        return None
    numbers = np.ndarray((count,), _BIG_ENDIAN, raw, at, (row,)).astype(np.uint64)
    if np.count_nonzero(numbers[1:] > numbers[:-1]) != count - 1:  # not rising
        return None
    fixed = raw[start:at]
    if fixed and np.ndarray((count,), _bytes(at - start), raw, start, (row,)).tobytes() != (
        fixed * count
    ):
        return None
    last = len(raw) - row + at
    lo, hi = (
        int.from_bytes(raw[at : at + TAIL], "big"),
        int.from_bytes(raw[last : last + TAIL], "big"),
    )
    return Span((topic, fixed.decode("ascii")), numbers, lo, hi)


_BIG_ENDIAN = np.dtype(">u8")
_BYTES: dict[int, np.dtype] = {}


def _bytes(width: int) -> np.dtype:
    """numpy's dtype of ``width`` bytes (made once: parsing its name costs as much as
    the copy it describes)."""
    dtype = _BYTES.get(width)
    if dtype is None:
        dtype = _BYTES[width] = np.dtype(f"S{width}")
    return dtype


Bounds = dict[RunKey, tuple[int, int, int]]  # per run key: (ids, lowest number, highest)


def number_bounds(topics: Sequence[str], ids: Sequence[str | None]) -> Bounds:
    """The ids that have a number, per run key: how many, the lowest and the highest
    (``topics``: each row's, or one for all). A batch of one client's ids of one length
    is read as an array (its tails joined), others id by id."""
    if len(topics) == 1 and ids and None not in ids:
        fixed = set(map(_BEFORE_TAIL, ids))  # type: ignore[arg-type]
        if len(fixed) == 1 and len(set(map(len, ids))) == 1:  # type: ignore[arg-type]
            tails = "".join(map(_TAIL_OF, ids))  # type: ignore[arg-type]
            if len(tails) == len(ids) * TAIL and tails.isascii() and fixed.copy().pop().isascii():
                numbers = np.frombuffer(tails.encode("ascii"), ">u8")
                key = (topics[0], fixed.pop())
                return {key: (len(ids), int(numbers.min()), int(numbers.max()))}
    bounds: Bounds = {}
    for row, uniq in enumerate(ids):
        form = id_number(topics[0] if len(topics) == 1 else topics[row], uniq) if uniq else None
        if form is not None:
            key, number = form
            count, lo, hi = bounds.get(key, (0, number, number))
            bounds[key] = (count + 1, min(lo, number), max(hi, number))
    return bounds


def id_number(topic: str, uniq: str) -> tuple[RunKey, int] | None:
    """(run key, number) of one id, as :func:`span_of` reads it; None when it has none
    (shorter than :data:`TAIL`, or not ASCII)."""
    if len(uniq) < TAIL or not uniq.isascii():
        return None
    return (topic, uniq[:-TAIL]), int.from_bytes(uniq[-TAIL:].encode("ascii"), "big")


@dataclass(slots=True, eq=False)
class Run:
    """A stored span: its numbers and each one's commitlog offset."""

    key: RunKey
    numbers: np.ndarray  # uint64, strictly rising
    offsets: np.ndarray  # int64, the unit of each number
    lo: int
    hi: int


class Runs:
    """The held runs, by key, sorted and never overlapping (module docstring)."""

    def __init__(self) -> None:
        self._by_key: dict[RunKey, tuple[list[int], list[Run]]] = {}  # (each run's lo, runs)
        self.ids = 0  # numbers held
        self.runs = 0

    def clear(self) -> None:
        self._by_key.clear()
        self.ids = self.runs = 0

    def keys(self) -> KeysView[RunKey]:
        """The run keys that hold runs now."""
        return self._by_key.keys()

    def find(self, span: Span) -> np.ndarray | None:
        """Per row of ``span``, the commitlog offset of the held unit of its number, or
        -1; None when none is held (the usual case: one bisect)."""
        held = self._by_key.get(span.key)
        if held is None:
            return None
        los, runs = held
        lo, numbers = span.lo, span.numbers
        found = None
        at = bisect_right(los, span.hi) - 1
        while at >= 0 and runs[at].hi >= lo:
            run = runs[at]
            where = np.minimum(run.numbers.searchsorted(numbers), len(run.numbers) - 1)
            hit = run.numbers[where] == numbers
            if hit.any():
                if found is None:
                    found = np.full(len(numbers), -1, np.int64)
                found[hit] = run.offsets[where[hit]]
            at -= 1
        return found

    def find_one(self, key: RunKey, number: int) -> int | None:
        """The commitlog offset of the held unit of (``key``, ``number``), else None."""
        held = self._by_key.get(key)
        if held is None:
            return None
        los, runs = held
        at = bisect_right(los, number) - 1
        if at < 0 or runs[at].hi < number:
            return None
        run = runs[at]
        where = int(run.numbers.searchsorted(np.uint64(number)))
        return int(run.offsets[where]) if int(run.numbers[where]) == number else None

    def first_above(self, key: RunKey, number: int) -> int | None:
        """The first number of the lowest held run of ``key`` above ``number``."""
        held = self._by_key.get(key)
        if held is None:
            return None
        los = held[0]
        at = bisect_right(los, number)
        return los[at] if at < len(los) else None

    def add(self, span: Span, offsets: np.ndarray) -> Run | None:
        """Hold ``span`` stored at ``offsets``; None (not held) when its range overlaps
        a held run of its key."""
        run = Run(span.key, span.numbers, offsets, span.lo, span.hi)
        held = self._by_key.get(span.key)
        if held is None:
            self._by_key[span.key] = ([run.lo], [run])
        else:
            los, runs = held
            at = bisect_right(los, run.lo)
            if (at and runs[at - 1].hi >= run.lo) or (at < len(runs) and runs[at].lo <= run.hi):
                return None
            los.insert(at, run.lo)
            runs.insert(at, run)
        self.ids += len(run.numbers)
        self.runs += 1
        return run

    def drop(self, gone: Sequence[Run]) -> None:
        """Forget held runs (the window's eviction: its oldest, which for a client whose
        ids rise are the first of their key, so the usual case is one slice deleted)."""
        by_key: dict[RunKey, list[Run]] = {}
        for run in gone:
            by_key.setdefault(run.key, []).append(run)
        for key, runs_gone in by_key.items():
            if key not in self._by_key:
                raise AssertionError(f"dropping runs of {key}, which holds none")
            los, runs = self._by_key[key]
            count = len(runs_gone)
            if count <= len(runs) and all(
                a is b for a, b in zip(runs[:count], runs_gone, strict=True)
            ):
                del los[:count], runs[:count]
            else:
                dropped = {id(run) for run in runs_gone}
                kept = [run for run in runs if id(run) not in dropped]
                if len(kept) != len(runs) - count:
                    raise AssertionError(f"dropping runs of {key} that are not held")
                los[:], runs[:] = [run.lo for run in kept], kept
            if not runs:
                del self._by_key[key]
            self.ids -= sum(len(run.numbers) for run in runs_gone)
            self.runs -= count

    def nbytes(self) -> int:
        """Memory of the held runs: their arrays and their own objects."""
        return 16 * self.ids + RUN_BYTES * self.runs


def holds(numbers: np.ndarray, number: int) -> bool:
    """Whether rising ``numbers`` hold ``number``."""
    if not len(numbers) or not int(numbers[0]) <= number <= int(numbers[-1]):
        return False
    return int(numbers[int(numbers.searchsorted(np.uint64(number)))]) == number


def overlap(numbers: np.ndarray, others: np.ndarray) -> bool:
    """Whether rising ``numbers`` and ``others`` share one."""
    if not len(numbers) or not len(others):
        return False
    if int(numbers[-1]) < int(others[0]) or int(numbers[0]) > int(others[-1]):
        return False
    return bool(np.intersect1d(numbers, others, assume_unique=True).size)


class Gathered:
    """A rebuild's consecutive units of one run key with rising numbers (a run to be)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.key: RunKey | None = None
        self.numbers: list[int] = []
        self.offsets: list[int] = []
        self.ids: list[str] = []
        self.store_ms = 0

    def extends(self, form: tuple[RunKey, int] | None, longest: int) -> bool:
        """Whether a unit of ``form`` may join (else the gathered ones are held first)."""
        if self.key is None:
            return True
        return (
            form is not None
            and form[0] == self.key
            and form[1] > self.numbers[-1]
            and len(self.numbers) < longest
        )

    def add(self, form: tuple[RunKey, int], uniq: str, phys: int, ms: int) -> None:
        self.key = form[0]
        self.numbers.append(form[1])
        self.offsets.append(phys)
        self.ids.append(uniq)
        self.store_ms = ms
