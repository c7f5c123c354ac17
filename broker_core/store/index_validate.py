"""Validation of one index file on open: roll back a torn put, then check every invariant.

Invariants (checked by :func:`validate`, in this order): the header is in range and agrees
with entry 1 and the newest entry; entries are numbered 1..index_count in append order;
phys offsets and stored times never decrease from one entry to the next; ``prev_entry`` of
entry n is the newest earlier entry in the same slot; a slot holds the newest entry in
it; ``hash_slot_count_used`` counts the non-empty slots; bytes past ``index_count`` are
zero. The first violation raises :class:`CorruptionError` naming the file and the byte.

:func:`roll_back_torn_put` runs first: a process killed inside ``put`` / ``put_many``
leaves entries (maybe already linked into their slots) past ``index_count``; they are
unlinked newest first, so each slot gets back the head it had before.

Both work on the file's mapping and read or write nothing else; the caller (``IndexFile``)
owns the mapping and calls them before handing the file out, on one thread.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np

from broker_core.errors import CorruptionError
from broker_core.store.index_layout import (
    CHUNK,
    ENTRY,
    ENTRY_DTYPE,
    ENTRY_OFF_DIFF,
    ENTRY_OFF_PHYS,
    ENTRY_OFF_PREV,
    INT32_MAX,
    OFF_BEGIN_PHYS,
    OFF_COUNT,
    OFF_END_PHYS,
    OFF_END_TS,
    OFF_SLOTS_USED,
    Header,
    Layout,
    chain,
)


def roll_back_torn_put(mm: mmap.mmap, layout: Layout, header: Header) -> bool:
    """Undo a put a crash cut short: its entries (and maybe slots) written, not its header.

    Returns True if anything was rolled back. A tail it cannot attribute to a put (a slot
    link pointing forward) is left for :func:`validate` to reject.
    """
    count = header.index_count
    if not 0 <= count < layout.max_entries:
        return False  # a full file has no tail; a count out of range fails validation
    torn: list[int] = []
    while count + len(torn) < layout.max_entries:
        if layout.read_entry(mm, count + len(torn) + 1) == (0, 0, 0, 0):
            break
        torn.append(count + len(torn) + 1)
    repaired = False
    for number in reversed(torn):
        khash, _phys, _diff, prev = layout.read_entry(mm, number)
        slot = khash % layout.slot_count
        if layout.read_slot(mm, slot) == number:
            if not 0 <= prev < number:
                return repaired  # not a put we wrote; validation will reject the slot
            layout.write_slot(mm, slot, prev)
        layout.write_entry(mm, number, 0, 0, 0, 0)
        repaired = True
    return repaired


def validate(mm: mmap.mmap, layout: Layout, header: Header, path: Path) -> None:
    """CorruptionError (with ``path`` and the byte position) unless every invariant holds."""
    check = _Checker(mm, layout, header, path)
    check.header()
    heads = check.entries()
    check.slots(heads)
    check.unused_zero()


class _Checker:
    """The checks of :func:`validate` over one mapping; each raises on the first violation."""

    def __init__(self, mm: mmap.mmap, layout: Layout, header: Header, path: Path) -> None:
        self._mm = mm
        self._layout = layout
        self._h = header
        self._path = path

    def _corrupt(self, message: str, position: int) -> CorruptionError:
        return CorruptionError(message, path=str(self._path), position=position)

    def header(self) -> None:
        h, max_entries = self._h, self._layout.max_entries
        if not 0 <= h.index_count <= max_entries:
            raise self._corrupt(
                f"index_count {h.index_count} outside [0, {max_entries}]", OFF_COUNT
            )
        if h.index_count == 0:
            if h != Header():
                raise self._corrupt("empty index file has non-zero header fields", 0)
            return
        if h.begin_phys_offset < 0:
            raise self._corrupt(f"begin_phys_offset {h.begin_phys_offset} < 0", OFF_BEGIN_PHYS)
        if h.end_phys_offset < h.begin_phys_offset:
            raise self._corrupt("end_phys_offset before begin_phys_offset", OFF_END_PHYS)
        if not 0 <= h.end_timestamp_ms - h.begin_timestamp_ms <= INT32_MAX:
            raise self._corrupt("end_timestamp_ms outside [begin, begin + 2^31)", OFF_END_TS)
        if not 1 <= h.hash_slot_count_used <= min(h.index_count, self._layout.slot_count):
            raise self._corrupt(
                f"hash_slot_count_used {h.hash_slot_count_used} impossible", OFF_SLOTS_USED
            )

    def entries(self) -> list[int]:
        """Check every entry against the header and its chain; return the slot heads.

        Vectorised over chunks of entries (a startup reads millions of them): each
        entry's ``prev`` must be the previous entry of its slot, physical offsets and
        time diffs must never go back and stay within the header's range.
        """
        h, layout = self._h, self._layout
        span = h.end_timestamp_ms - h.begin_timestamp_ms
        heads = np.zeros(layout.slot_count, np.int64)
        last_phys, last_diff = h.begin_phys_offset, 0
        for first in range(1, h.index_count + 1, CHUNK):
            stop = min(h.index_count, first + CHUNK - 1)
            raw = self._mm[layout.entry_pos(first) : layout.entry_pos(stop + 1)]
            entries = np.frombuffer(raw, ENTRY_DTYPE)
            numbers = np.arange(first, stop + 1, dtype=np.int64)
            slots = entries["hash"].astype(np.int64) % layout.slot_count
            expected, touched, newest = chain(slots, numbers, heads)
            phys = entries["phys"].astype(np.int64)
            diff = entries["diff"].astype(np.int64)
            before_phys = np.concatenate(([last_phys], phys[:-1]))
            before_diff = np.concatenate(([last_diff], diff[:-1]))
            bad_phys = (phys < before_phys) | (phys > h.end_phys_offset)
            bad_diff = (diff < before_diff) | (diff > span)
            if first == 1:
                bad_phys[0] |= bool(phys[0] != last_phys)
                bad_diff[0] |= bool(diff[0] != 0)
            self._raise_first_bad(first, entries, expected, bad_phys, bad_diff)
            heads[touched] = newest
            last_phys, last_diff = int(phys[-1]), int(diff[-1])
        if h.index_count and (last_phys != h.end_phys_offset or last_diff != span):
            raise self._corrupt("header end fields disagree with the newest entry", OFF_END_TS)
        return [int(head) for head in heads.tolist()]

    def _raise_first_bad(
        self,
        first: int,
        entries: np.ndarray,
        expected: np.ndarray,
        bad_phys: np.ndarray,
        bad_diff: np.ndarray,
    ) -> None:
        """CorruptionError for the first entry of a chunk that fails a check, if any."""
        bad_prev = entries["prev"] != expected
        failing = np.flatnonzero(bad_prev | bad_phys | bad_diff)
        if not len(failing):
            return
        i = int(failing[0])
        number, pos = first + i, self._layout.entry_pos(first + i)
        if bad_prev[i]:
            raise self._corrupt(
                f"entry {number} links to {int(entries['prev'][i])}, expected {int(expected[i])}",
                pos + ENTRY_OFF_PREV,
            )
        if bad_phys[i]:
            raise self._corrupt(
                f"entry {number} phys offset {int(entries['phys'][i])} out of order",
                pos + ENTRY_OFF_PHYS,
            )
        raise self._corrupt(
            f"entry {number} time diff {int(entries['diff'][i])} out of order", pos + ENTRY_OFF_DIFF
        )

    def slots(self, heads: list[int]) -> None:
        """Every slot holds its newest entry; ``hash_slot_count_used`` counts the used ones."""
        layout = self._layout
        for start in range(0, layout.slot_count, CHUNK):
            stop = min(layout.slot_count, start + CHUNK)
            raw = self._mm[layout.slot_pos(start) : layout.slot_pos(stop)]
            want = struct.pack(f">{stop - start}i", *heads[start:stop])
            if raw == want:
                continue
            for slot in range(start, stop):
                value = layout.read_slot(self._mm, slot)
                if value != heads[slot]:
                    raise self._corrupt(
                        f"hash slot {slot} holds {value}, expected {heads[slot]}",
                        layout.slot_pos(slot),
                    )
        used = sum(1 for head in heads if head)
        if used != self._h.hash_slot_count_used:
            raise self._corrupt(
                f"hash_slot_count_used {self._h.hash_slot_count_used}, slots say {used}",
                OFF_SLOTS_USED,
            )

    def unused_zero(self) -> None:
        """Entries past index_count are never written except by an in-flight put."""
        step = CHUNK * ENTRY.size
        zeros = bytes(step)
        count = self._h.index_count
        for start in range(self._layout.entry_pos(count + 1), len(self._mm), step):
            raw = self._mm[start : start + step]
            if raw != zeros[: len(raw)]:
                first = start + next(i for i, b in enumerate(raw) if b)
                raise self._corrupt(f"non-zero bytes past entry {count}", first)
