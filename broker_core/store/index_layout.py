"""The byte layout of one index file: records, positions, and the slot-chain arithmetic.

The table of fields is in :mod:`broker_core.store.index_file`. This module holds what both
the file (``index_file``) and its validation (``index_validate``) need: the ``struct``
records, the byte offsets of fields (for ``CorruptionError`` positions), the header as a
value, where slot ``s`` and entry ``n`` live in a file of given dimensions, and the
vectorised linking of new entries into their hash slots, and the vectorised key hash
(:func:`key_hashes`). No I/O; safe from any thread.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from broker_core.errors import ConfigError

HEADER = struct.Struct(">qqqqii")
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">Iqii")
ENTRY_DTYPE = np.dtype([("hash", ">u4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])

# Byte offsets of the header fields, for CorruptionError positions.
OFF_BEGIN_TS, OFF_END_TS, OFF_BEGIN_PHYS, OFF_END_PHYS = 0, 8, 16, 24
OFF_SLOTS_USED, OFF_COUNT = 32, 36
# Byte offsets of the fields inside one entry.
ENTRY_OFF_PHYS, ENTRY_OFF_DIFF, ENTRY_OFF_PREV = 4, 12, 16

INT32_MAX = 2**31 - 1
CHUNK = 65536  # entries or slots decoded per read while validating


@dataclass(slots=True)
class Header:
    """The 40-byte header; all zero for an empty file."""

    begin_timestamp_ms: int = 0
    end_timestamp_ms: int = 0
    begin_phys_offset: int = 0
    end_phys_offset: int = 0
    hash_slot_count_used: int = 0
    index_count: int = 0

    @classmethod
    def unpack_from(cls, buf: mmap.mmap) -> Header:
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


def check_dimensions(slot_count: int, max_entries: int) -> None:
    """ConfigError unless both dimensions are in ``[1, INT32_MAX]``."""
    if not 1 <= slot_count <= INT32_MAX:
        raise ConfigError(f"index slot_count must be in [1, {INT32_MAX}], got {slot_count}")
    if not 1 <= max_entries <= INT32_MAX:
        raise ConfigError(f"index max_entries must be in [1, {INT32_MAX}], got {max_entries}")


@dataclass(frozen=True, slots=True)
class Layout:
    """Where things are in a file of ``slot_count`` slots and ``max_entries`` entries."""

    slot_count: int
    max_entries: int

    @property
    def entries_at(self) -> int:
        """Byte position of entry 1."""
        return HEADER.size + self.slot_count * SLOT.size

    @property
    def file_size(self) -> int:
        return self.entries_at + self.max_entries * ENTRY.size

    def slot_pos(self, slot: int) -> int:
        return HEADER.size + slot * SLOT.size

    def entry_pos(self, number: int) -> int:
        """Byte position of entry ``number`` (1-based)."""
        return self.entries_at + (number - 1) * ENTRY.size

    def read_slot(self, mm: mmap.mmap, slot: int) -> int:
        value: int = SLOT.unpack_from(mm, self.slot_pos(slot))[0]
        return value

    def write_slot(self, mm: mmap.mmap, slot: int, number: int) -> None:
        SLOT.pack_into(mm, self.slot_pos(slot), number)

    def read_entry(self, mm: mmap.mmap, number: int) -> tuple[int, int, int, int]:
        """``(key_hash, phys_offset, time_diff_ms, prev_entry)`` of entry ``number``."""
        khash, phys, diff, prev = ENTRY.unpack_from(mm, self.entry_pos(number))
        return khash, phys, diff, prev

    def write_entry(
        self, mm: mmap.mmap, number: int, khash: int, phys: int, diff: int, prev: int
    ) -> None:
        ENTRY.pack_into(mm, self.entry_pos(number), khash, phys, diff, prev)


def chain(
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


def link(
    slots: np.ndarray, numbers: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`chain` plus how many touched slots were empty, with a short cut for the
    common batch whose entries share no slot.

    Then each entry's ``prev`` is its slot's old head and every slot's newest entry is
    the entry itself (one sort to find out, one gather); else :func:`chain` does it all
    (at once when the first and last entry share a slot, e.g. one key repeated).
    """
    if len(slots) > 1 and (
        slots[0] == slots[-1] or bool(np.any((ordered := np.sort(slots))[1:] == ordered[:-1]))
    ):
        prev, touched, newest = chain(slots, numbers, heads)
        return prev, touched, newest, int(np.count_nonzero(heads[touched] == 0))
    prev = heads[slots]
    return prev, slots, numbers, len(prev) - int(np.count_nonzero(prev))


KEY_HASH_MAX_BYTES = 128  # longer keys are hashed one call each (zlib.crc32)
KEY_HASH_MIN_KEYS = 128  # below this many keys numpy's fixed cost is more than zlib's calls


def _crc32_tables(max_bytes: int) -> np.ndarray:
    """``T[d * 256 + b]``: CRC32's linear part of byte ``b`` followed by ``d`` bytes.

    CRC32 is affine over GF(2): for keys ``a``, ``b`` of one length,
    ``crc32(a) ^ crc32(b) == XOR_i T[d_i * 256 + (a_i ^ b_i)]``, ``d_i`` the number of
    bytes after byte ``i``. Row 0 is the byte-wise CRC table; each further row pushes
    the previous one through one zero byte.
    """
    rows = np.empty((max_bytes, 256), np.uint32)
    row = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        row = np.where(row & 1, (row >> 1) ^ np.uint32(0xEDB88320), row >> 1).astype(np.uint32)
    rows[0] = row
    for d in range(1, max_bytes):
        rows[d] = (rows[d - 1] >> 8) ^ rows[0][rows[d - 1] & 0xFF]
    return rows.ravel()


_CRC_TABLES = _crc32_tables(KEY_HASH_MAX_BYTES)
_ROW_STARTS = np.arange(KEY_HASH_MAX_BYTES, dtype=np.intp)[:, None] * 256  # row d of the table


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """``message.key_hash`` of every key, as uint32.

    Many keys of one byte length (message ids, the common case) are hashed as one byte
    matrix (:func:`uniform_key_hashes`); any other list one ``zlib.crc32`` call a key.
    """
    if len(keys) >= KEY_HASH_MIN_KEYS:
        hashes = uniform_key_hashes(keys)
        if hashes is not None:
            return hashes
    return zlib_key_hashes(keys)


def zlib_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """``message.key_hash`` of every key, as uint32: one ``zlib.crc32`` call a key."""
    crc32, encode = zlib.crc32, str.encode
    return np.fromiter(map(crc32, map(encode, keys)), np.uint32, len(keys))


def uniform_key_hashes(keys: Sequence[str]) -> np.ndarray | None:
    """Hashes of non-empty, NUL-free keys of one UTF-8 length; None for any other list.

    The keys are joined with NUL after each and cut into rows: they are of one length
    exactly when the bytes split evenly, each row ends in NUL and no other byte is NUL.
    Each key's hash is the first's XOR the table terms of the bytes where it differs from
    the first; only the columns where some key differs are looked up (the shared prefix
    of message ids costs nothing).
    """
    count = len(keys)
    raw = ("\0".join(keys) + "\0").encode()
    width, rest = divmod(len(raw), count or 1)
    if rest or not 2 <= width <= KEY_HASH_MAX_BYTES + 1 or raw.count(0) != count:
        return None
    if raw[width - 1 :: width].strip(b"\0"):  # count NULs, but not one at each row's end
        return None
    rows = np.frombuffer(raw, np.uint8).reshape(count, width)
    first = np.uint32(zlib.crc32(raw[: width - 1]))
    differ = (rows ^ rows[0]).T  # column-major: one row per byte position
    columns = np.flatnonzero(differ.any(axis=1))
    if not len(columns):
        return np.full(count, first, np.uint32)
    at = differ[columns] + _ROW_STARTS[width - 2 - columns]
    hashes: np.ndarray = np.bitwise_xor.reduce(_CRC_TABLES.take(at), axis=0) ^ first
    return hashes
