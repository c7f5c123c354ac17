"""The one packer: a :class:`~broker_core.store.columns.ColumnBatch`'s finished units.

Under the commitlog's put lock, ``CommitLog.append`` takes queue offsets
(:func:`assign_queue_offsets`) and, once per segment the batch touches, packs the units
placed there (:func:`pack_units`). What the batch left open in its header records is
filled here: queue offset, physical offset, store time and host, and the unit CRC (over
header bytes [12, 100), continued from the tail's CRC, which the batch computed outside
the lock). Then header, body and tail of each unit are joined into one buffer. The byte
layout is :mod:`broker_core.protocol.unit`'s; readers, recovery and replication verify it
with ``codec.check_unit`` and ``protocol.verify``.

A run of many headers is filled with numpy field assignments, one per field for the
whole run; a run shorter than ``SMALL_BATCH`` is filled record by record with the same
``struct`` layouts instead, since numpy's fixed cost per call would make a one-message
send slower (tests compare the two byte for byte).

The header records are written in place: after the append the batch's ``head`` says
where every message went (``queue_offset``, ``physical_offset``, ``store_timestamp_ms``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Final

import numpy as np

from broker_core.protocol import unit as layout
from broker_core.store.columns import SMALL_BATCH, ColumnBatch, QueueKey

_PHYS_POS: Final = layout.field_pos("physical_offset")
_PHYS: Final = struct.Struct(">q")
_STAMP: Final = struct.Struct(">q4si")  # store time, store host ip and port: contiguous
assert layout.field_pos("store_host_port") == layout.STORE_TIME_POS + 12


def assign_queue_offsets(
    batch: ColumnBatch,
    queue_rows: dict[QueueKey, list[int]],
    take_many: Callable[[str, int, int], int],
) -> None:
    """Set each queued message's queue offset, consecutive per queue in batch order;
    ``take_many(topic, queue_id, n)`` reserves ``n`` offsets of a queue and returns the
    first. Messages in no queue keep offset 0."""
    offsets = batch.queue_offsets
    for (topic, queue_id), rows in queue_rows.items():
        first = take_many(topic, queue_id, len(rows))
        if len(rows) == 1:
            offsets[rows[0]] = first
        else:
            offsets[rows] = np.arange(first, first + len(rows))


def pack_units(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> bytes:
    """The finished units of messages ``[lo, hi)``, placed from ``physical_offset``.

    Queue offsets must be assigned already. Pure but for filling ``batch.head[lo:hi]``.
    """
    if hi - lo < SMALL_BATCH:
        _place_each(batch, lo, hi, physical_offset, store_timestamp_ms, store_host)
    else:
        _place_all(batch, lo, hi, physical_offset, store_timestamp_ms, store_host)
    size = layout.HEADER_SIZE
    raw = batch.raw[lo * size : hi * size]
    pieces: list[bytes | memoryview] = []
    for at, body, tail in zip(
        range(0, len(raw), size), batch.bodies[lo:hi], batch.tails[lo:hi], strict=True
    ):
        pieces += (raw[at : at + size], body, tail)
    return b"".join(pieces)


def _place_all(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> None:
    """Physical offsets, store time and host, then unit CRCs of a run, field by field."""
    head = batch.head[lo:hi]
    sizes = batch.sizes[lo:hi].astype(np.int64)
    head["physical_offset"] = np.cumsum(sizes) + (physical_offset - sizes)
    head["store_timestamp_ms"] = store_timestamp_ms
    head["store_host_ip"] = np.void(store_host[0])
    head["store_host_port"] = store_host[1]
    crc32, size, crc_start = zlib.crc32, layout.HEADER_SIZE, layout.CRC_START
    raw = batch.raw[lo * size : hi * size]
    head["unit_crc"] = [
        crc32(raw[at + crc_start : at + size], tail_crc)
        for at, tail_crc in zip(range(0, len(raw), size), batch.tail_crcs[lo:hi], strict=True)
    ]


def _place_each(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> None:
    """:func:`_place_all` for a short run, record by record."""
    ip, port = store_host
    raw, crc32 = batch.raw, zlib.crc32
    at, phys = lo * layout.HEADER_SIZE, physical_offset
    for size, tail_crc in zip(batch.sizes[lo:hi].tolist(), batch.tail_crcs[lo:hi], strict=True):
        _PHYS.pack_into(raw, at + _PHYS_POS, phys)
        _STAMP.pack_into(raw, at + layout.STORE_TIME_POS, store_timestamp_ms, ip, port)
        unit_crc = crc32(raw[at + layout.CRC_START : at + layout.HEADER_SIZE], tail_crc)
        layout.CRC.pack_into(raw, at + layout.UNIT_CRC_POS, unit_crc)
        at += layout.HEADER_SIZE
        phys += size
