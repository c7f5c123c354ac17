"""Index files: find messages by business key or message id within a time range.

The index maps a key (each of a message's ``KEYS`` and its unique id) to commitlog
physical offsets. It is *derived* data: the commitlog is the truth, and anything the index
loses is rebuilt by re-dispatching messages from the commitlog.

One :class:`IndexFile` is a hash map with chaining inside one fixed-size, memory-mapped
file; ``index_service.IndexService`` owns a directory of them.

File format (all integers big-endian; one ``struct.Struct`` per record)::

    offset              size  field
    ------------------  ----  --------------------------------------------------------
    header (40 bytes)
    0                      8  begin_timestamp_ms   int64  store time of entry 1 (time base)
    8                      8  end_timestamp_ms     int64  store time of the newest entry
    16                     8  begin_phys_offset    int64  phys offset of entry 1
    24                     8  end_phys_offset      int64  phys offset of the newest entry
    32                     4  hash_slot_count_used int32  hash slots that are not empty
    36                     4  index_count          int32  entries written (0 = empty file)
    hash slots (slot_count x 4 bytes), slot s at 40 + 4*s
    40 + 4*s               4  head                 int32  newest entry number whose
                                                          key_hash % slot_count == s; 0 = none
    entries (max_entries x 20 bytes), entry n (1-based) at 40 + 4*slot_count + 20*(n-1)
    +0                     4  key_hash             uint32 CRC32 of the key (message.key_hash)
    +4                     8  phys_offset          int64  commitlog offset of the message
    +12                    4  time_diff_ms         int32  store time - begin_timestamp_ms
    +16                    4  prev_entry           int32  previous entry in this slot; 0 = none

    file size = 40 + 4*slot_count + 20*max_entries (ftruncate + posix_fallocate, then mmap)
    file name = creation time, UTC, 17 digits yyyyMMddHHmmssSSS (bumped to stay unique
                and increasing); ``manifest.json`` lists the sealed files (see below)

Invariants (all checked by :meth:`IndexFile.open`): entries are numbered 1..index_count
in append order; phys offsets and stored times never decrease from one entry to the next
(a store time earlier than the previous entry's -- the wall clock stepped back -- is
recorded as the previous entry's time); ``prev_entry`` of entry n is the newest earlier
entry in the same slot; a slot holds the newest entry in it; the header agrees with
entry 1 and the newest entry.

Crash contract:

* Nothing is checksummed. The index is derived data, every query hit is confirmed by the
  store reading the (checksummed) message from the commitlog, and the structural checks
  on open (sizes, header ranges, every chain link, every slot head) catch torn or garbage
  files. A file that fails them raises :class:`CorruptionError` naming the file and byte.
* ``put`` (``put_many``) writes the entry (entries), then the slot heads, then the
  header. A process killed before the header write leaves the entries of that one put
  (maybe already linked into their slots) past ``index_count``; ``open`` rolls them back
  (``repaired_tail``). Bytes past ``index_count``
  must otherwise be zero. Any other damage (power loss reordering mmap pages, a crash in
  ``truncate_from``, disk corruption) fails validation. Pages reach disk on ``flush``
  (fdatasync), when a file is sealed, or whenever the kernel writes them back.

Threads: :class:`IndexFile` is not thread-safe; its owner, ``index_service.IndexService``,
serialises every call with one lock, so a query never sees a half-done put or truncation.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from broker_core.errors import (
    ConfigError,
    CorruptionError,
    DiskFullError,
    InvalidOffsetError,
    StoreClosedError,
)
from broker_core.message import key_hash
from broker_core.store.mapped_file import fdatasync_path

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">Iqii")
_ENTRY_DTYPE = np.dtype([("hash", ">u4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])

# Byte offsets of the header fields, for CorruptionError positions.
OFF_BEGIN_TS, OFF_END_TS, OFF_BEGIN_PHYS, OFF_END_PHYS = 0, 8, 16, 24
OFF_SLOTS_USED, OFF_COUNT = 32, 36
# Byte offsets of the fields inside one entry.
ENTRY_OFF_PHYS, ENTRY_OFF_DIFF, ENTRY_OFF_PREV = 4, 12, 16

INT32_MAX = 2**31 - 1
_HEADER_SIZE, _SLOT_SIZE, _ENTRY_SIZE = HEADER.size, SLOT.size, ENTRY.size
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
NAME_RE = re.compile(r"^\d{17}$")
_CHUNK = 65536  # entries or slots decoded per read while validating


@dataclass(slots=True)
class _Header:
    begin_timestamp_ms: int = 0
    end_timestamp_ms: int = 0
    begin_phys_offset: int = 0
    end_phys_offset: int = 0
    hash_slot_count_used: int = 0
    index_count: int = 0

    @classmethod
    def unpack_from(cls, buf: mmap.mmap) -> _Header:
        return cls(*HEADER.unpack_from(buf, 0))

    def pack_into(self, buf: mmap.mmap) -> None:
        HEADER.pack_into(
            buf,
            0,
            self.begin_timestamp_ms,
            self.end_timestamp_ms,
            self.begin_phys_offset,
            self.end_phys_offset,
            self.hash_slot_count_used,
            self.index_count,
        )


def _check_dimensions(slot_count: int, max_entries: int) -> None:
    if not 1 <= slot_count <= INT32_MAX:
        raise ConfigError(f"index slot_count must be in [1, {INT32_MAX}], got {slot_count}")
    if not 1 <= max_entries <= INT32_MAX:
        raise ConfigError(f"index max_entries must be in [1, {INT32_MAX}], got {max_entries}")


def _reserve(fd: int, size: int, path: Path) -> None:
    """Allocate the blocks now so a full disk fails here, not as SIGBUS on an mmap write."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(f"no room to create index file {path}") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def _chain(
    slots: np.ndarray, numbers: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link entries ``numbers`` (ascending) into their hash ``slots``, vectorised.

    ``heads[s]`` is slot s's newest entry before these. Returns each entry's ``prev``
    (the entry before it in its slot), the slots touched and the newest entry of each.
    """
    order = np.argsort(slots, kind="stable")
    by_slot, by_number = slots[order], numbers[order]
    follows = np.zeros(len(order), np.bool_)
    follows[1:] = by_slot[1:] == by_slot[:-1]
    prev = np.empty(len(order), np.int64)
    prev[order] = np.where(
        follows, np.concatenate(([0], by_number[:-1])), heads[by_slot].astype(np.int64)
    )
    ends_run = np.ones(len(order), np.bool_)
    ends_run[:-1] = ~follows[1:]
    return prev, by_slot[ends_run], by_number[ends_run]


class IndexFile:
    """One fixed-size index file. Build with :meth:`create` or :meth:`open`."""

    def __init__(self, path: Path, slot_count: int, max_entries: int, mm: mmap.mmap) -> None:
        self._path = path
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._mm: mmap.mmap | None = mm
        self._h = _Header.unpack_from(mm)
        self._entries_at = HEADER.size + slot_count * SLOT.size
        self._dirty = False
        self.repaired_tail = False  # open() rolled back a put a crash interrupted

    # -- construction --------------------------------------------------------------------

    @staticmethod
    def file_size(slot_count: int, max_entries: int) -> int:
        return HEADER.size + slot_count * SLOT.size + max_entries * ENTRY.size

    @classmethod
    def create(cls, path: str | os.PathLike[str], slot_count: int, max_entries: int) -> IndexFile:
        """Create a new, empty file; FileExistsError if ``path`` exists."""
        _check_dimensions(slot_count, max_entries)
        p = Path(path)
        size = cls.file_size(slot_count, max_entries)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            _reserve(fd, size, p)
            mm = mmap.mmap(fd, size)
        except BaseException:
            p.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return cls(p, slot_count, max_entries, mm)

    @classmethod
    def open(cls, path: str | os.PathLike[str], slot_count: int, max_entries: int) -> IndexFile:
        """Map an existing file and validate it; CorruptionError if it is not sound."""
        _check_dimensions(slot_count, max_entries)
        p = Path(path)
        size = cls.file_size(slot_count, max_entries)
        fd = os.open(p, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise CorruptionError(
                    f"index file is {actual} bytes, expected {size} "
                    f"({slot_count} slots, {max_entries} entries)",
                    path=str(p),
                    position=min(actual, size),
                )
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        index = cls(p, slot_count, max_entries, mm)
        try:
            index._roll_back_torn_put()
            index._validate()
        except BaseException:
            index.close()
            raise
        return index

    # -- properties ----------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def name(self) -> str:
        return self._path.name

    @property
    def slot_count(self) -> int:
        return self._slot_count

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def begin_timestamp_ms(self) -> int:
        return self._h.begin_timestamp_ms

    @property
    def end_timestamp_ms(self) -> int:
        return self._h.end_timestamp_ms

    @property
    def begin_phys_offset(self) -> int:
        return self._h.begin_phys_offset

    @property
    def end_phys_offset(self) -> int:
        return self._h.end_phys_offset

    @property
    def hash_slot_count_used(self) -> int:
        return self._h.hash_slot_count_used

    @property
    def index_count(self) -> int:
        return self._h.index_count

    @property
    def is_empty(self) -> bool:
        return self._h.index_count == 0

    @property
    def is_full(self) -> bool:
        return self._h.index_count >= self._max_entries

    @property
    def closed(self) -> bool:
        return self._mm is None

    # -- low-level access ----------------------------------------------------------------

    def _map(self) -> mmap.mmap:
        if self._mm is None:
            raise StoreClosedError(f"index file {self._path} is closed")
        return self._mm

    def _slot_pos(self, slot: int) -> int:
        return HEADER.size + slot * SLOT.size

    def _entry_pos(self, number: int) -> int:
        return self._entries_at + (number - 1) * ENTRY.size

    def _read_slot(self, slot: int) -> int:
        value: int = SLOT.unpack_from(self._map(), self._slot_pos(slot))[0]
        return value

    def _write_slot(self, slot: int, number: int) -> None:
        SLOT.pack_into(self._map(), self._slot_pos(slot), number)

    def _read_entry(self, number: int) -> tuple[int, int, int, int]:
        khash, phys, diff, prev = ENTRY.unpack_from(self._map(), self._entry_pos(number))
        return khash, phys, diff, prev

    def _write_entry(self, number: int, khash: int, phys: int, diff: int, prev: int) -> None:
        ENTRY.pack_into(self._map(), self._entry_pos(number), khash, phys, diff, prev)

    def _iter_entries(self) -> Iterator[tuple[int, tuple[int, int, int, int]]]:
        """Yield ``(number, (hash, phys, diff, prev))`` for entries 1..index_count."""
        mm = self._map()
        number, count = 1, self._h.index_count
        while number <= count:
            stop = min(count, number + _CHUNK - 1)
            raw = mm[self._entry_pos(number) : self._entry_pos(stop + 1)]
            for fields in ENTRY.iter_unpack(raw):
                yield number, fields
                number += 1

    def _corrupt(self, message: str, position: int) -> CorruptionError:
        return CorruptionError(message, path=str(self._path), position=position)

    # -- validation ----------------------------------------------------------------------

    def _roll_back_torn_put(self) -> None:
        """Undo a put a crash cut short: its entries (and maybe slots) written, not its header.

        A batch put (``put_many``) may leave several entries past ``index_count``; they
        are unlinked newest first, so each slot gets back the head it had before.
        """
        count = self._h.index_count
        if not 0 <= count < self._max_entries:
            return  # a full file has no tail; a count out of range fails validation
        torn: list[int] = []
        while count + len(torn) < self._max_entries:
            if self._read_entry(count + len(torn) + 1) == (0, 0, 0, 0):
                break
            torn.append(count + len(torn) + 1)
        for number in reversed(torn):
            khash, _phys, _diff, prev = self._read_entry(number)
            slot = khash % self._slot_count
            if self._read_slot(slot) == number:
                if not 0 <= prev < number:
                    return  # not a put we wrote; validation will reject the slot
                self._write_slot(slot, prev)
            self._write_entry(number, 0, 0, 0, 0)
            self.repaired_tail = True

    def _validate(self) -> None:
        self._check_header()
        heads = self._check_entries()
        self._check_slots(heads)
        self._check_unused_zero()

    def _check_header(self) -> None:
        h = self._h
        if not 0 <= h.index_count <= self._max_entries:
            raise self._corrupt(
                f"index_count {h.index_count} outside [0, {self._max_entries}]", OFF_COUNT
            )
        if h.index_count == 0:
            if h != _Header():
                raise self._corrupt("empty index file has non-zero header fields", 0)
            return
        if h.begin_phys_offset < 0:
            raise self._corrupt(f"begin_phys_offset {h.begin_phys_offset} < 0", OFF_BEGIN_PHYS)
        if h.end_phys_offset < h.begin_phys_offset:
            raise self._corrupt("end_phys_offset before begin_phys_offset", OFF_END_PHYS)
        if not 0 <= h.end_timestamp_ms - h.begin_timestamp_ms <= INT32_MAX:
            raise self._corrupt("end_timestamp_ms outside [begin, begin + 2^31)", OFF_END_TS)
        if not 1 <= h.hash_slot_count_used <= min(h.index_count, self._slot_count):
            raise self._corrupt(
                f"hash_slot_count_used {h.hash_slot_count_used} impossible", OFF_SLOTS_USED
            )

    def _check_entries(self) -> list[int]:
        """Check every entry against the header and its chain; return the slot heads.

        Vectorised over chunks of entries (a startup reads millions of them): each
        entry's ``prev`` must be the previous entry of its slot, physical offsets and
        time diffs must never go back and stay within the header's range.
        """
        h = self._h
        span = h.end_timestamp_ms - h.begin_timestamp_ms
        heads = np.zeros(self._slot_count, np.int64)
        last_phys, last_diff = h.begin_phys_offset, 0
        mm = self._map()
        for first in range(1, h.index_count + 1, _CHUNK):
            stop = min(h.index_count, first + _CHUNK - 1)
            raw = mm[self._entry_pos(first) : self._entry_pos(stop + 1)]
            entries = np.frombuffer(raw, _ENTRY_DTYPE)
            numbers = np.arange(first, stop + 1, dtype=np.int64)
            slots = entries["hash"].astype(np.int64) % self._slot_count
            expected, touched, newest = _chain(slots, numbers, heads)
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
        number, pos = first + i, self._entry_pos(first + i)
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

    def _check_slots(self, heads: list[int]) -> None:
        mm = self._map()
        for start in range(0, self._slot_count, _CHUNK):
            stop = min(self._slot_count, start + _CHUNK)
            raw = mm[self._slot_pos(start) : self._slot_pos(stop)]
            want = struct.pack(f">{stop - start}i", *heads[start:stop])
            if raw == want:
                continue
            for slot in range(start, stop):
                value = self._read_slot(slot)
                if value != heads[slot]:
                    raise self._corrupt(
                        f"hash slot {slot} holds {value}, expected {heads[slot]}",
                        self._slot_pos(slot),
                    )
        used = sum(1 for head in heads if head)
        if used != self._h.hash_slot_count_used:
            raise self._corrupt(
                f"hash_slot_count_used {self._h.hash_slot_count_used}, slots say {used}",
                OFF_SLOTS_USED,
            )

    def _check_unused_zero(self) -> None:
        """Entries past index_count are never written except by an in-flight put."""
        mm = self._map()
        step = _CHUNK * ENTRY.size
        zeros = bytes(step)
        for start in range(self._entry_pos(self._h.index_count + 1), len(mm), step):
            raw = mm[start : start + step]
            if raw != zeros[: len(raw)]:
                first = start + next(i for i, b in enumerate(raw) if b)
                raise self._corrupt(f"non-zero bytes past entry {self._h.index_count}", first)

    # -- operations ----------------------------------------------------------------------

    def put(self, key: str, phys_offset: int, store_timestamp_ms: int) -> bool:
        """Append one entry; False if the file is full or the time span would overflow.

        The hot path of dispatch: positions are computed inline, one header write.
        """
        h = self._h
        mm = self._map()
        count = h.index_count
        if phys_offset < 0 or (count and phys_offset < h.end_phys_offset):
            raise InvalidOffsetError(
                f"index put at phys {phys_offset} after {h.end_phys_offset}: out of order"
            )
        if count >= self._max_entries:
            return False
        if count == 0:
            begin = stored = store_timestamp_ms
            h.begin_timestamp_ms, h.begin_phys_offset = begin, phys_offset
        else:
            begin = h.begin_timestamp_ms
            stored = (
                store_timestamp_ms
                if store_timestamp_ms > h.end_timestamp_ms
                else h.end_timestamp_ms
            )
            if stored - begin > INT32_MAX:
                return False
        number = count + 1
        khash = key_hash(key)
        slot_pos = _HEADER_SIZE + (khash % self._slot_count) * _SLOT_SIZE
        prev = SLOT.unpack_from(mm, slot_pos)[0]
        ENTRY.pack_into(
            mm, self._entries_at + count * _ENTRY_SIZE, khash, phys_offset, stored - begin, prev
        )
        SLOT.pack_into(mm, slot_pos, number)
        h.end_timestamp_ms, h.end_phys_offset, h.index_count = stored, phys_offset, number
        if prev == 0:
            h.hash_slot_count_used += 1
        HEADER.pack_into(
            mm,
            0,
            h.begin_timestamp_ms,
            stored,
            h.begin_phys_offset,
            phys_offset,
            h.hash_slot_count_used,
            number,
        )
        self._dirty = True
        return True

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, store_timestamp_ms: int) -> int:
        """Append entries for key hashes stored at one time, in order; returns how many fit.

        The same file as ``put`` called for each in turn, in three writes: the entries,
        the slot heads, the header. Fewer than all are taken when the file fills; none
        when the time span would overflow. ``phys`` must not decrease.
        """
        h = self._h
        mm = self._map()
        count = h.index_count
        if not len(hashes):
            return 0
        first_phys = int(phys[0])
        if (
            first_phys < 0
            or (count and first_phys < h.end_phys_offset)
            or bool(np.any(phys[1:] < phys[:-1]))
        ):
            raise InvalidOffsetError(
                f"index batch put at phys {first_phys} after {h.end_phys_offset}, or out of order"
            )
        take = min(len(hashes), self._max_entries - count)
        if take <= 0:
            return 0
        if count == 0:
            begin = stored = store_timestamp_ms
        else:
            begin, stored = h.begin_timestamp_ms, max(store_timestamp_ms, h.end_timestamp_ms)
            if stored - begin > INT32_MAX:
                return 0
        numbers = np.arange(count + 1, count + take + 1, dtype=np.int64)
        slots = hashes[:take].astype(np.int64) % self._slot_count
        heads = np.frombuffer(mm, ">i4", self._slot_count, HEADER.size)
        try:
            prev, touched, newest = _chain(slots, numbers, heads)
            entries = np.empty(take, _ENTRY_DTYPE)
            entries["hash"], entries["phys"] = hashes[:take], phys[:take]
            entries["diff"], entries["prev"] = stored - begin, prev
            start = self._entry_pos(count + 1)
            mm[start : start + take * _ENTRY_SIZE] = entries.tobytes()
            h.hash_slot_count_used += int(np.count_nonzero(heads[touched] == 0))
            heads[touched] = newest
        finally:
            del heads  # an exported buffer would keep the mapping from closing
        if count == 0:
            h.begin_timestamp_ms, h.begin_phys_offset = begin, first_phys
        h.end_timestamp_ms, h.end_phys_offset = stored, int(phys[take - 1])
        h.index_count = count + take
        h.pack_into(mm)
        self._dirty = True
        return take

    def query(self, key: str, begin_ms: int, end_ms: int, max_results: int) -> list[int]:
        """Phys offsets, newest first, of entries with ``key``'s hash stored in the range.

        Other keys with the same hash are included; the caller confirms the real key.
        """
        h = self._h
        self._map()
        if max_results <= 0 or h.index_count == 0:
            return []
        if end_ms < h.begin_timestamp_ms or begin_ms > h.end_timestamp_ms:
            return []
        khash = key_hash(key)
        number = self._read_slot(khash % self._slot_count)
        found: list[int] = []
        while 0 < number <= h.index_count and len(found) < max_results:
            entry_hash, phys, diff, prev = self._read_entry(number)
            stored = h.begin_timestamp_ms + diff
            if stored < begin_ms:
                break  # stored times never decrease, so every older entry is older still
            if entry_hash == khash and stored <= end_ms and phys not in found:
                found.append(phys)
            if prev >= number:
                break  # a damaged link; never loop
            number = prev
        return found

    def _first_at_or_after(self, phys_offset: int) -> int:
        """The lowest entry number whose phys offset is >= ``phys_offset`` (binary search)."""
        lo, hi = 1, self._h.index_count + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read_entry(mid)[1] >= phys_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate_from(self, phys_offset: int) -> int:
        """Remove every entry with phys >= ``phys_offset``; return how many were removed."""
        h = self._h
        first = self._first_at_or_after(phys_offset)
        removed = h.index_count - first + 1
        if removed <= 0:
            return 0
        for number in range(h.index_count, first - 1, -1):
            khash, _phys, _diff, prev = self._read_entry(number)
            slot = khash % self._slot_count
            if self._read_slot(slot) == number:
                self._write_slot(slot, prev)
                if prev == 0:
                    h.hash_slot_count_used -= 1
            self._write_entry(number, 0, 0, 0, 0)
        h.index_count = first - 1
        if h.index_count == 0:
            self._h = _Header()
        else:
            _khash, phys, diff, _prev = self._read_entry(h.index_count)
            h.end_phys_offset, h.end_timestamp_ms = phys, h.begin_timestamp_ms + diff
        self._h.pack_into(self._map())
        self._dirty = True
        return removed

    def flush(self) -> None:
        """fdatasync the file if anything changed since the last flush.

        Not ``mmap.flush``: CPython's msync holds the GIL for the whole disk wait and
        would stall every appender; fdatasync writes back the same dirty pages without.
        """
        if self._dirty:
            self._map()
            self._dirty = False
            fdatasync_path(self._path)

    def close(self) -> None:
        """Unmap (idempotent). Does not flush; call :meth:`flush` first for durability."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def __repr__(self) -> str:
        h = self._h
        return (
            f"IndexFile({self.name}, entries={h.index_count}/{self._max_entries}, "
            f"phys=[{h.begin_phys_offset}, {h.end_phys_offset}])"
        )


# -- file names and the manifest ---------------------------------------------------------
