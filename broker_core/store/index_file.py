"""Index files: find messages by business key or message id within a time range.

The index maps a key (each of a message's ``KEYS`` and its unique id) to commitlog
physical offsets. It is *derived* data: the commitlog is the truth, and anything the index
loses is rebuilt by re-dispatching messages from the commitlog.

One :class:`IndexFile` is a hash map with chaining inside one fixed-size, memory-mapped
file. :class:`IndexService` owns a directory of them, rolls to a new file when the current
one fills, answers queries across files, and repairs the set after a crash.

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
* ``put`` writes the entry, then the slot head, then the header. A process killed before
  the header write leaves one entry (maybe already linked into its slot) past
  ``index_count``; ``open`` rolls it back (``repaired_tail``). Bytes past ``index_count``
  must otherwise be zero. Any other damage (power loss reordering mmap pages, a crash in
  ``truncate_from``, disk corruption) fails validation. Pages reach disk on ``flush``
  (msync), when a file is sealed, or whenever the kernel writes them back.
* :class:`IndexService` deletes files that fail validation and notices sealed files that
  went missing through ``manifest.json`` (version, then one record per sealed file: name,
  begin/end phys, index_count; written atomically: temp file, fsync, rename, fsync of the
  directory; a lost manifest is re-derived, since every file but the newest is sealed).
  It then truncates the whole index at the lowest phys offset that was lost, so the index
  is always a prefix of the commitlog and re-dispatched puts stay in phys order, and
  reports that offset as ``rebuild_from``.
* Recovery recipe for the store: ``validate_and_repair()``; then if ``rebuild_from`` is
  set, re-dispatch from it; else ``truncate_from(max_phys_offset)`` and re-dispatch from
  ``max_phys_offset`` (its message may be only partly indexed); from the commitlog's start
  when ``max_phys_offset`` is -1. Because the index is a prefix, ``max_phys_offset`` alone
  is a safe restart point even if a crash loses ``rebuild_from``; ``mark_rebuilt()``
  clears it once the store has re-dispatched.

Threads: :class:`IndexFile` is not thread-safe; it is owned by an :class:`IndexService`,
which serialises every public method with one lock, so a query never sees a half-done put
or truncation. The store's dispatch thread is the only writer (``put_keys``,
``truncate_from``, ``validate_and_repair`` at start-up); retention may call
``delete_before``; any thread may call ``query``, ``max_phys_offset`` and ``flush``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker_core.errors import (
    ConfigError,
    CorruptionError,
    DiskFullError,
    InvalidOffsetError,
    StoreClosedError,
    StoreError,
)
from broker_core.message import key_hash

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">Iqii")

# Byte offsets of the header fields, for CorruptionError positions.
OFF_BEGIN_TS, OFF_END_TS, OFF_BEGIN_PHYS, OFF_END_PHYS = 0, 8, 16, 24
OFF_SLOTS_USED, OFF_COUNT = 32, 36
# Byte offsets of the fields inside one entry.
ENTRY_OFF_PHYS, ENTRY_OFF_DIFF, ENTRY_OFF_PREV = 4, 12, 16

INT32_MAX = 2**31 - 1
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
        HEADER.pack_into(buf, 0, *astuple(self))


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
        """Undo a put a crash cut short: its entry (and maybe slot) written, not its header."""
        number = self._h.index_count + 1
        if not 1 <= number <= self._max_entries:
            return
        khash, phys, diff, prev = self._read_entry(number)
        if khash == phys == diff == prev == 0:
            return
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
        """Check every entry against the header and its chain; return the slot heads."""
        h = self._h
        span = h.end_timestamp_ms - h.begin_timestamp_ms
        heads = [0] * self._slot_count
        last_phys, last_diff = h.begin_phys_offset, 0
        for number, (khash, phys, diff, prev) in self._iter_entries():
            pos = self._entry_pos(number)
            slot = khash % self._slot_count
            if prev != heads[slot]:
                raise self._corrupt(
                    f"entry {number} links to {prev}, expected {heads[slot]}",
                    pos + ENTRY_OFF_PREV,
                )
            if not last_phys <= phys <= h.end_phys_offset or (number == 1 and phys != last_phys):
                raise self._corrupt(
                    f"entry {number} phys offset {phys} out of order", pos + ENTRY_OFF_PHYS
                )
            if not last_diff <= diff <= span or (number == 1 and diff != 0):
                raise self._corrupt(
                    f"entry {number} time diff {diff} out of order", pos + ENTRY_OFF_DIFF
                )
            heads[slot] = number
            last_phys, last_diff = phys, diff
        if h.index_count and (last_phys != h.end_phys_offset or last_diff != span):
            raise self._corrupt("header end fields disagree with the newest entry", OFF_END_TS)
        return heads

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
        """Append one entry; False if the file is full or the time span would overflow."""
        h = self._h
        self._map()
        if phys_offset < 0 or (h.index_count and phys_offset < h.end_phys_offset):
            raise InvalidOffsetError(
                f"index put at phys {phys_offset} after {h.end_phys_offset}: out of order"
            )
        if self.is_full:
            return False
        if h.index_count == 0:
            begin, stored = store_timestamp_ms, store_timestamp_ms
        else:
            begin, stored = h.begin_timestamp_ms, max(store_timestamp_ms, h.end_timestamp_ms)
            if stored - begin > INT32_MAX:
                return False
        number = h.index_count + 1
        khash = key_hash(key)
        slot = khash % self._slot_count
        prev = self._read_slot(slot)
        self._write_entry(number, khash, phys_offset, stored - begin, prev)
        self._write_slot(slot, number)
        if number == 1:
            h.begin_timestamp_ms, h.begin_phys_offset = begin, phys_offset
        h.end_timestamp_ms, h.end_phys_offset, h.index_count = stored, phys_offset, number
        if prev == 0:
            h.hash_slot_count_used += 1
        h.pack_into(self._map())
        self._dirty = True
        return True

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
        """msync the mapping if anything changed since the last flush."""
        if self._dirty:
            self._map().flush()
            self._dirty = False

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


def name_for_ms(epoch_ms: int) -> str:
    """The 17-digit ``yyyyMMddHHmmssSSS`` (UTC) name for a creation time."""
    seconds, millis = divmod(epoch_ms, 1000)
    stamp = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y%m%d%H%M%S")
    return f"{stamp}{millis:03d}"


def ms_for_name(name: str) -> int | None:
    """Inverse of :func:`name_for_ms`; None if ``name`` is not an index file name."""
    if not NAME_RE.match(name):
        return None
    try:
        moment = datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1000 + int(name[14:])


@dataclass(frozen=True, slots=True)
class SealedFile:
    """A manifest record: a file that filled (or ran out of time span) and was rolled."""

    name: str
    begin_phys: int
    end_phys: int
    index_count: int

    @classmethod
    def of(cls, index: IndexFile) -> SealedFile:
        return cls(index.name, index.begin_phys_offset, index.end_phys_offset, index.index_count)

    def matches(self, index: IndexFile) -> bool:
        return self == SealedFile.of(index)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(directory: Path, sealed: Iterable[SealedFile]) -> None:
    """Atomically replace ``manifest.json``: temp file, fsync, rename, fsync the directory."""
    doc = {
        "version": MANIFEST_VERSION,
        "sealed": [
            {
                "name": s.name,
                "begin_phys": s.begin_phys,
                "end_phys": s.end_phys,
                "index_count": s.index_count,
            }
            for s in sorted(sealed, key=lambda s: s.name)
        ],
    }
    target = directory / MANIFEST_NAME
    tmp = directory / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    fsync_directory(directory)


def read_manifest(directory: Path) -> tuple[dict[str, SealedFile], str]:
    """The manifest's records by name, and a problem description ("" if none)."""
    path = directory / MANIFEST_NAME
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, ""
    except (OSError, ValueError) as exc:
        return {}, f"{MANIFEST_NAME} unreadable ({exc}); sealed-file losses cannot be checked"
    try:
        if doc["version"] != MANIFEST_VERSION:
            raise ValueError(f"version {doc['version']!r}")
        records = [
            SealedFile(
                str(r["name"]), int(r["begin_phys"]), int(r["end_phys"]), int(r["index_count"])
            )
            for r in doc["sealed"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        return {}, f"{MANIFEST_NAME} malformed ({exc!r}); sealed-file losses cannot be checked"
    return {r.name: r for r in records}, ""


# -- the service -------------------------------------------------------------------------


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class IndexService:
    """All index files of one store: put, query, roll, truncate, retain and repair."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        slot_count: int,
        max_entries: int,
        *,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        _check_dimensions(slot_count, max_entries)
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        self._sealed: dict[str, SealedFile] = {}
        self._rebuild_from: int | None = None
        self._closed = False
        self._pending_report = self._load()

    # -- properties ----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def file_names(self) -> list[str]:
        with self._lock:
            return [f.name for f in self._files]

    @property
    def sealed_names(self) -> list[str]:
        with self._lock:
            return sorted(self._sealed)

    @property
    def max_phys_offset(self) -> int:
        """Phys offset of the newest entry, -1 when the index is empty."""
        with self._lock:
            return self._max_phys_locked()

    @property
    def rebuild_from(self) -> int | None:
        """Lowest phys offset whose entries were lost and must be re-dispatched, or None."""
        with self._lock:
            return self._rebuild_from

    def mark_rebuilt(self) -> None:
        """The store re-dispatched from :attr:`rebuild_from`; forget it."""
        with self._lock:
            self._rebuild_from = None

    # -- loading and repair --------------------------------------------------------------

    def _load(self) -> list[str]:
        """Open every file, dropping bad ones; truncate at the lowest loss. Returns notes."""
        (self._dir / (MANIFEST_NAME + ".tmp")).unlink(missing_ok=True)
        self._sealed, problem = read_manifest(self._dir)
        as_read = dict(self._sealed)
        notes = [problem] if problem else []
        names = sorted(n for n in os.listdir(self._dir) if ms_for_name(n) is not None)
        lost: list[int] = []
        for name in names:
            self._open_one(name, lost, notes)
        for record in [r for r in self._sealed.values() if r.name not in names]:
            notes.append(
                f"sealed index file {record.name} is missing: its {record.index_count} "
                f"entries for phys [{record.begin_phys}, {record.end_phys}] must be rebuilt"
            )
            lost.append(record.begin_phys)
            del self._sealed[record.name]
        self._drop_inner_empty_files(notes)
        if lost:
            notes.extend(self._truncate_locked(min(lost)))
            low = min(lost)
            self._rebuild_from = low if self._rebuild_from is None else min(low, self._rebuild_from)
        self._sealed = {n: r for n, r in self._sealed.items() if self._file_named(n)}
        for index in self._files[:-1]:  # only the newest file is written: the rest are sealed
            self._sealed.setdefault(index.name, SealedFile.of(index))
        if self._sealed != as_read or problem:
            write_manifest(self._dir, self._sealed.values())
        return notes

    def _open_one(self, name: str, lost: list[int], notes: list[str]) -> None:
        path = self._dir / name
        record = self._sealed.get(name)
        try:
            index = IndexFile.open(path, self._slot_count, self._max_entries)
            if record is not None and not record.matches(index):
                index.close()
                raise CorruptionError(
                    f"header disagrees with its manifest record {record}",
                    path=str(path),
                    position=0,
                )
        except CorruptionError as exc:
            if record is not None:
                low, what = record.begin_phys, f"[{record.begin_phys}, {record.end_phys}]"
            else:  # unknown range: everything after the last good entry (inclusive)
                low = max(self._max_phys_locked(), 0)
                what = f">= {low}"
            path.unlink(missing_ok=True)
            self._sealed.pop(name, None)
            lost.append(low)
            notes.append(
                f"index file {name} failed validation ({exc}); deleted, phys {what} must be rebuilt"
            )
            return
        if index.repaired_tail:
            notes.append(f"index file {name}: rolled back one put a crash interrupted")
        self._files.append(index)

    def _drop_inner_empty_files(self, notes: list[str]) -> None:
        """Only the newest file may be empty (a crash right after creating it)."""
        for index in [f for f in self._files[:-1] if f.is_empty]:
            self._delete_file(index)
            notes.append(f"index file {index.name} was empty and not the newest; deleted")

    def _file_named(self, name: str) -> IndexFile | None:
        return next((f for f in self._files if f.name == name), None)

    def validate_and_repair(self) -> list[str]:
        """Re-open and re-check every file; return what was dropped since the last call.

        Files failing validation are deleted, missing sealed files are noticed via the
        manifest, everything at or after the lowest lost phys offset is truncated, and
        :attr:`rebuild_from` tells the store where to re-dispatch from.
        """
        with self._lock:
            self._check_open()
            for index in self._files:
                index.flush()
                index.close()
            self._files = []
            notes = self._pending_report + self._load()
            self._pending_report = []
            return notes

    # -- writing -------------------------------------------------------------------------

    def put_keys(self, keys: Iterable[str], phys_offset: int, store_timestamp_ms: int) -> int:
        """Index every distinct non-empty key of one message; return entries written."""
        unique = list(dict.fromkeys(k for k in keys if k))
        with self._lock:
            self._check_open()
            newest = self._max_phys_locked()
            if phys_offset < max(newest, 0):
                raise InvalidOffsetError(
                    f"index put at phys {phys_offset} is before the newest entry {newest}"
                )
            for key in unique:
                self._put_one(key, phys_offset, store_timestamp_ms)
            return len(unique)

    def _put_one(self, key: str, phys_offset: int, store_timestamp_ms: int) -> None:
        if not self._files or self._files[-1].name in self._sealed:
            self._create_file()  # a sealed newest file: crash between seal and create
        if self._files[-1].put(key, phys_offset, store_timestamp_ms):
            return
        index = self._roll()
        if not index.put(key, phys_offset, store_timestamp_ms):
            raise StoreError(f"a fresh index file {index.name} refused an entry")

    def _roll(self) -> IndexFile:
        """Seal the newest file (flush, record in the manifest) and start a new one."""
        old = self._files[-1]
        old.flush()
        self._sealed[old.name] = SealedFile.of(old)
        write_manifest(self._dir, self._sealed.values())
        return self._create_file()

    def _create_file(self) -> IndexFile:
        last = ms_for_name(self._files[-1].name) if self._files else None
        epoch_ms = self._clock_ms() if last is None else max(self._clock_ms(), last + 1)
        while True:
            try:
                index = IndexFile.create(
                    self._dir / name_for_ms(epoch_ms), self._slot_count, self._max_entries
                )
                break
            except FileExistsError:
                epoch_ms += 1
        fsync_directory(self._dir)
        self._files.append(index)
        return index

    # -- reading -------------------------------------------------------------------------

    def query(self, key: str, begin_ms: int, end_ms: int, max_results: int) -> list[int]:
        """Phys offsets for ``key`` stored in [begin_ms, end_ms], newest first, deduplicated.

        May include messages whose other keys share ``key``'s hash; confirm by reading.
        """
        found: list[int] = []
        with self._lock:
            self._check_open()
            for index in reversed(self._files):
                if len(found) >= max_results:
                    break
                if index.is_empty:
                    continue
                if index.end_timestamp_ms < begin_ms or index.begin_timestamp_ms > end_ms:
                    continue
                for phys in index.query(key, begin_ms, end_ms, max_results):
                    if phys not in found and len(found) < max_results:
                        found.append(phys)
        return found

    def _max_phys_locked(self) -> int:
        return next((f.end_phys_offset for f in reversed(self._files) if not f.is_empty), -1)

    # -- truncation and retention --------------------------------------------------------

    def truncate_from(self, phys_offset: int) -> None:
        """Recovery: drop every entry with phys >= ``phys_offset``."""
        with self._lock:
            self._check_open()
            self._truncate_locked(phys_offset)

    def _truncate_locked(self, phys_offset: int) -> list[str]:
        notes: list[str] = []
        while self._files:
            index = self._files[-1]
            if index.is_empty or index.begin_phys_offset >= phys_offset:
                notes.append(
                    f"index file {index.name} ({index.index_count} entries) dropped "
                    f"by truncation at phys {phys_offset}"
                )
                self._forget_sealed(index.name)
                self._delete_file(index)
                continue
            if index.end_phys_offset >= phys_offset:
                self._forget_sealed(index.name)
                removed = index.truncate_from(phys_offset)
                notes.append(
                    f"index file {index.name}: {removed} entries at phys >= {phys_offset} truncated"
                )
            break
        return notes

    def delete_before(self, min_phys_offset: int) -> list[str]:
        """Retention: delete whole files whose newest phys < ``min_phys_offset``.

        Never deletes the newest file. Returns the names deleted.
        """
        deleted: list[str] = []
        with self._lock:
            self._check_open()
            while len(self._files) > 1 and self._files[0].end_phys_offset < min_phys_offset:
                index = self._files[0]
                self._forget_sealed(index.name)
                self._delete_file(index)
                deleted.append(index.name)
        return deleted

    def _forget_sealed(self, name: str) -> None:
        """Drop a manifest record before its file changes, so a crash can't flag a loss."""
        if self._sealed.pop(name, None) is not None:
            write_manifest(self._dir, self._sealed.values())

    def _delete_file(self, index: IndexFile) -> None:
        index.close()
        with contextlib.suppress(FileNotFoundError):
            index.path.unlink()
        self._files.remove(index)

    # -- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"index service for {self._dir} is closed")

    def flush(self) -> None:
        with self._lock:
            self._check_open()
            for index in self._files:
                index.flush()

    def close(self) -> None:
        """Flush and unmap every file (idempotent)."""
        with self._lock:
            if self._closed:
                return
            for index in self._files:
                index.flush()
                index.close()
            self._files = []
            self._closed = True

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
