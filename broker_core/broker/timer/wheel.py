"""The timing wheel: a fixed array of slots, one per ``precision_ms`` of time, on disk.

Slot ``i`` covers every *slot time* ``t`` (a multiple of ``precision_ms``) with
``(t // precision_ms) % wheel_slots == i``; the slot remembers which ``t`` it currently
holds, so an entry left over from an earlier turn of the wheel is recognised as stale
and never fired. A slot points into the timer log (``log.py``): the first and last
record of its chain and how many records the chain has. Firing time ``t`` reads one slot
and walks only its chain — the cost of a tick is the number of timers due in it.

Slot layout (big-endian, :data:`SLOT`, 32 bytes; the file is ``wheel_slots × 32`` bytes,
memory-mapped; an all-zero slot is empty)::

    offset  size  field          type     meaning
     0      8     slot_time_ms   int64    the slot time this chain belongs to
     8      8     first_pos      int64    timer-log position of the chain's first record
    16      8     last_pos       int64    position of its last record (the walk starts here)
    24      4     count          int32    records in the chain
    28      4     crc32          uint32   CRC32 of bytes 0..27

Crash contract: :meth:`TimingWheel.link` appends the records, fsyncs the timer log, and
only then updates the slots and flushes the map, so a slot never points past durable
log bytes. A slot is 32-byte aligned and so never straddles a disk sector: a crash
leaves it old or new, not torn. A slot whose CRC fails raises CorruptionError.

Invariant kept by the caller (``TimerService``): every slot time linked lies in
``[read_time, read_time + (wheel_slots - 1) × precision_ms]``, so two live slot times
never share a slot.

Threads: not thread-safe; ``TimerService`` serialises every call under its lock.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from broker_core.broker.timer.crc_record import CrcRecord
from broker_core.broker.timer.log import NO_PREV, RECORD_BYTES, TimerLog, TimerRecord
from broker_core.errors import ConfigError, CorruptionError
from broker_core.store.mapped_file import fdatasync_path

SLOT = CrcRecord(
    "q"  # slot_time_ms
    "q"  # first_pos
    "q"  # last_pos
    "i"  # count
)  # then the crc32 of the 28 bytes before it (``crc_record``)
SLOT_BYTES = SLOT.size
_EMPTY = bytes(SLOT_BYTES)


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot's chain: where it starts and ends in the timer log, and its length."""

    slot_time_ms: int
    first_pos: int
    last_pos: int
    count: int


class TimingWheel:
    """``wheel_slots`` slots of ``precision_ms`` each, kept in one memory-mapped file."""

    def __init__(self, path: Path, precision_ms: int, wheel_slots: int) -> None:
        if precision_ms < 1 or wheel_slots < 2:
            raise ConfigError("timer precision_ms must be ≥ 1 and wheel_slots ≥ 2")
        self.path = path
        self.precision_ms = precision_ms
        self.wheel_slots = wheel_slots
        size = wheel_slots * SLOT_BYTES
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            existing = os.fstat(fd).st_size
            if existing not in (0, size):
                raise ConfigError(
                    f"{path} is {existing} bytes but {wheel_slots} slots need {size}: "
                    "the wheel size changed; keep wheel_slots as it was"
                )
            if existing == 0:
                os.ftruncate(fd, size)
                os.fsync(fd)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def _index(self, slot_time_ms: int) -> int:
        return (slot_time_ms // self.precision_ms) % self.wheel_slots

    def get(self, slot_time_ms: int) -> Slot | None:
        """The chain of ``slot_time_ms``; None when the slot is empty or holds another time."""
        pos = self._index(slot_time_ms) * SLOT_BYTES
        raw = self._map[pos : pos + SLOT_BYTES]
        if raw == _EMPTY:
            return None
        slot_time, first, last, count = SLOT.unpack(
            raw, what="timer wheel slot", path=str(self.path), position=pos
        )
        if slot_time != slot_time_ms:
            return None
        return Slot(slot_time, first, last, count)

    def _put(self, slot: Slot) -> None:
        pos = self._index(slot.slot_time_ms) * SLOT_BYTES
        raw = SLOT.pack(slot.slot_time_ms, slot.first_pos, slot.last_pos, slot.count)
        self._map[pos : pos + SLOT_BYTES] = raw

    def link(self, log: TimerLog, entries: Sequence[tuple[int, TimerRecord]]) -> list[int]:
        """Append each ``(slot_time_ms, record)`` to the log and chain it into that slot.

        The record's ``prev_pos`` is filled in here. Durable on return: log fsynced
        first, then the slots written and flushed. Returns the records' positions.
        """
        if not entries:
            return []
        pending: dict[int, Slot] = {}
        chained: list[TimerRecord] = []
        next_pos = log.end
        for slot_time, rec in entries:
            slot = pending.get(slot_time) or self.get(slot_time)
            chained.append(replace(rec, prev_pos=slot.last_pos if slot else NO_PREV))
            pending[slot_time] = Slot(
                slot_time,
                slot.first_pos if slot else next_pos,
                next_pos,
                (slot.count if slot else 0) + 1,
            )
            next_pos += RECORD_BYTES
        indexes = {self._index(t) for t in pending}
        assert len(indexes) == len(pending), "two live slot times share one wheel slot"
        positions = log.append_many(chained)
        log.flush()
        for slot in pending.values():
            self._put(slot)
        fdatasync_path(self.path)
        return positions

    def walk(self, log: TimerLog, slot_time_ms: int) -> list[tuple[int, TimerRecord]]:
        """``(position, record)`` of every record chained at ``slot_time_ms``, newest first.

        Reads only that slot and its chain. CorruptionError when the chain is shorter
        than the slot's count or a record does not verify.
        """
        slot = self.get(slot_time_ms)
        if slot is None:
            return []
        out: list[tuple[int, TimerRecord]] = []
        pos = slot.last_pos
        for _ in range(slot.count):
            if pos == NO_PREV:
                raise CorruptionError(
                    f"timer wheel chain of {slot_time_ms} ends after {len(out)} of "
                    f"{slot.count} records",
                    path=str(self.path),
                )
            rec = log.read(pos)
            out.append((pos, rec))
            pos = rec.prev_pos
        return out

    def flush(self) -> None:
        fdatasync_path(self.path)  # not mmap.flush: msync holds the GIL while it waits

    def close(self) -> None:
        if not self._map.closed:
            self.flush()
            self._map.close()
