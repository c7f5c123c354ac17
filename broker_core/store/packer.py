"""The one packer: a :class:`~broker_core.store.columns.ColumnBatch`'s finished units.

Under the commitlog's put lock, ``CommitLog.append`` takes queue offsets
(:func:`assign_queue_offsets`) and, once per segment the batch touches, packs the units
placed there (:func:`pack_units`). What the batch left open in its header records is
filled here: queue offset, physical offset, store time and host. Then the unit CRCs
(tail, then header bytes [12, 100)): a batch that arrived with them computed with those
fields zero (a bulk frame's units) has them patched (:mod:`broker_core.protocol.unit_crc`:
CRC-32 is affine, so no CRC call per unit); a batch the broker encoded itself has each
computed whole from its tail's CRC. The headers are then written over their placeholders
in the batch's joined units (``batch.units``), and the run goes out as one buffer: no
per-unit join, one write per segment. The byte layout is
:mod:`broker_core.protocol.unit`'s; readers, recovery and replication verify it with
``codec.check_unit`` and ``protocol.verify``.

A run of many headers is filled with numpy field assignments, one per field for the
whole run, its CRCs patched with one table gather; a run shorter than ``SMALL_BATCH`` is
filled record by record with the same ``struct`` layouts (a patch is then one
``zlib.crc32`` of the unit's 88-byte delta), since numpy's fixed cost per call would make
a one-message send slower (tests compare the two byte for byte).

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
from broker_core.protocol import unit_crc
from broker_core.store.columns import SMALL_BATCH, ColumnBatch, QueueKey

_PHYS_POS: Final = layout.field_pos("physical_offset")
_PHYS: Final = struct.Struct(">q")
_STAMP: Final = struct.Struct(">q4si")  # store time, store host ip and port: contiguous
assert layout.field_pos("store_host_port") == layout.STORE_TIME_POS + 12
# open fields that differ between units of a run (the store time and host do not)
_VARYING: Final = unit_crc.field_positions(("queue_id", "queue_offset", "physical_offset"))
_VARYING_LOW: Final = np.r_[  # the same but for the high halves of the two offsets
    _VARYING[:4], _VARYING[8:12], _VARYING[16:20]
]
assert _VARYING_LOW.tolist() == [16, 17, 18, 19, 28, 29, 30, 31, 36, 37, 38, 39]


def assign_queue_offsets(
    batch: ColumnBatch,
    queue_rows: dict[QueueKey, list[int]],
    take_many: Callable[[str, int, int], int],
) -> None:
    """Set each queued message's queue offset, consecutive per queue in batch order;
    ``take_many(topic, queue_id, n)`` reserves ``n`` offsets of a queue and returns the
    first. Messages in no queue keep offset 0."""
    offsets = batch.queue_offsets
    largest = 0
    for (topic, queue_id), rows in queue_rows.items():
        first = take_many(topic, queue_id, len(rows))
        largest = max(largest, first + len(rows) - 1)
        if len(rows) == 1:
            offsets[rows[0]] = first
        elif rows[-1] - rows[0] == len(rows) - 1:  # side by side (rows ascend): a slice
            offsets[rows[0] : rows[-1] + 1] = np.arange(first, first + len(rows))
        else:
            offsets[rows] = np.arange(first, first + len(rows))
    batch.max_queue_offset = largest


def pack_units(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> bytearray | memoryview:
    """The finished units of messages ``[lo, hi)``, placed from ``physical_offset``:
    ``batch.units`` or a view of it (valid while the batch lives).

    Queue offsets must be assigned already. Pure but for filling ``batch.head[lo:hi]``
    (whose CRCs are patched in place: a run is packed once) and writing those headers
    into ``batch.units``.
    """
    if hi - lo < SMALL_BATCH:
        start, end = _place_each(batch, lo, hi, physical_offset, store_timestamp_ms, store_host)
    else:
        _place_all(batch, lo, hi, physical_offset, store_timestamp_ms, store_host)
        start = int(batch.starts[lo])
        end = int(batch.starts[hi - 1]) + int(batch.sizes[hi - 1])
    units = batch.units
    return units if start == 0 and end == len(units) else memoryview(units)[start:end]


def _place_all(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> None:
    """Physical offsets, store time and host, then unit CRCs of a run, field by field;
    then the headers into the units."""
    head = batch.head[lo:hi]
    starts = batch.starts[lo:hi]
    first = int(starts[0])
    head["physical_offset"] = starts + (physical_offset - first)
    headers = head.view(np.uint8).reshape(hi - lo, layout.HEADER_SIZE)
    stamp = _STAMP.pack(store_timestamp_ms, *store_host)  # one slice for the three fields
    headers[:, layout.STORE_TIME_POS : layout.STORE_TIME_POS + len(stamp)] = np.frombuffer(
        stamp, np.uint8
    )
    if batch.tail_crcs is None:
        last = physical_offset + int(starts[-1]) - first
        _patch_crcs(head, headers, batch.max_queue_offset, (physical_offset, last), stamp)
    else:  # the broker's own encoding: each CRC computed whole, now the fields are final
        crc32, size, start = zlib.crc32, layout.HEADER_SIZE, unit_crc.SPAN_START
        raw = batch.raw[lo * size : hi * size]
        head["unit_crc"] = [
            crc32(raw[at + start : at + size], tail_crc)
            for at, tail_crc in zip(range(0, len(raw), size), batch.tail_crcs[lo:hi], strict=True)
        ]
    _write_headers(batch, lo, hi, headers)


def _patch_crcs(
    head: np.ndarray,
    headers: np.ndarray,
    max_queue_offset: int | None,
    physical_range: tuple[int, int],
    stamp: bytes,
) -> None:
    """Patch a run's unit CRCs (computed with the open fields zero) for its open fields:
    the store time and host are the same in every unit (one delta); so are the high
    halves of the offsets when the physical offsets share theirs and no queue offset
    reaches 2**32 (then only 12 bytes a unit go through the table, else 20)."""
    same = unit_crc.bytes_delta(layout.STORE_TIME_POS, stamp)
    varying = _VARYING
    low, high = physical_range
    if max_queue_offset is not None and max_queue_offset >> 32 == 0 and low >> 32 == high >> 32:
        same ^= unit_crc.bytes_delta(_PHYS_POS, (low >> 32).to_bytes(4, "big"))
        varying = _VARYING_LOW
    head["unit_crc"] ^= unit_crc.delta_crcs(headers[:, varying], varying) ^ np.uint32(same)


def _write_headers(batch: ColumnBatch, lo: int, hi: int, headers: np.ndarray) -> None:
    """Write a run's headers over their placeholders in ``batch.units``."""
    sizes = batch.sizes[lo:hi]
    units = np.frombuffer(batch.units, np.uint8)
    size = int(sizes[0])
    if int(sizes.min()) == int(sizes.max()):  # units of one size: a strided copy
        first = int(batch.starts[lo])
        block = units[first : first + size * (hi - lo)].reshape(hi - lo, size)
        block[:, : layout.HEADER_SIZE] = headers
    else:
        layout.write_rows(units, batch.starts[lo:hi], headers)


def _place_each(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> tuple[int, int]:
    """:func:`_place_all` for a short run, record by record; returns where the run
    starts and ends in ``batch.units``."""
    ip, port = store_host
    raw, units, span, crc = batch.raw, batch.units, unit_crc.SPAN_START, layout.CRC
    at, phys, size = lo * layout.HEADER_SIZE, physical_offset, layout.HEADER_SIZE
    first = start = batch.unit_start(lo)
    tail_crcs = batch.tail_crcs
    for row, unit_size in enumerate(batch.sizes[lo:hi].tolist(), lo):
        _PHYS.pack_into(raw, at + _PHYS_POS, phys)
        _STAMP.pack_into(raw, at + layout.STORE_TIME_POS, store_timestamp_ms, ip, port)
        if tail_crcs is not None:  # computed whole
            crc.pack_into(
                raw,
                at + layout.UNIT_CRC_POS,
                zlib.crc32(raw[at + span : at + size], tail_crcs[row]),
            )
        else:
            (base,) = crc.unpack_from(raw, at + layout.UNIT_CRC_POS)
            patched = unit_crc.patch_one(base, unit_crc.open_part(raw[at + span : at + size]))
            crc.pack_into(raw, at + layout.UNIT_CRC_POS, patched)
        units[start : start + size] = raw[at : at + size]
        at += size
        phys += unit_size
        start += unit_size
    return first, start
