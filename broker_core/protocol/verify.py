"""The unit verifier: checks a block of units back to back, vectorised (numpy).

Used wherever many units are read or received at once (the client's column decoder, and
a bulk send's block on the broker). For a buffer of units and the size of each it checks:

* the sizes add up to the buffer, every ``total_size`` equals its size, every magic is a
  message magic, and body, topic and properties lengths add up to the unit;
* the unit CRC (topic and properties, then header bytes [12, 100)) and the body CRC,
  unless ``verify_crc=False``.

Any failure raises CorruptionError naming the first bad unit. Pure; any thread.

>>> verify_units(b"", np.zeros(0, np.int32)).starts.tolist()
[]
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from broker_core.errors import CorruptionError
from broker_core.protocol.crc_rows import rows_to_recheck
from broker_core.protocol.unit import (
    CRC_START,
    HEADER_DTYPE,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    MIN_UNIT_BYTES,
)


@dataclass(frozen=True, slots=True)
class UnitSpans:
    """Where each verified unit's parts sit in the buffer (int64 arrays, one per unit)."""

    starts: np.ndarray
    ends: np.ndarray
    head: np.ndarray  # records of HEADER_DTYPE
    queue_offset: np.ndarray
    body_length: np.ndarray
    topic_at: np.ndarray  # the topic's length byte
    topic_length: np.ndarray
    properties_at: np.ndarray  # the properties' 2-byte length
    properties_length: np.ndarray


def headers_of(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The fixed headers of the units at ``starts``, as records of :data:`HEADER_DTYPE`.

    A sliding window over the buffer makes each unit's 100 header bytes one row, so one
    fancy index copies every header (no per-field index arrays).
    """
    rows = sliding_window_view(buf, HEADER_SIZE)[starts]
    return rows.view(HEADER_DTYPE).ravel()


def fail(what: str, queue_offsets: np.ndarray, bad: np.ndarray) -> CorruptionError:
    """The error for the first unit flagged in ``bad``."""
    index = int(np.flatnonzero(bad)[0])
    at = int(queue_offsets[index]) if index < len(queue_offsets) else -1
    return CorruptionError(f"{what} (unit {index} of the batch, queue offset {at})")


def verify_units(
    data: bytes | memoryview, sizes: np.ndarray, *, verify_crc: bool = True
) -> UnitSpans:
    """Verify the units in ``data`` (``sizes[i]`` bytes each) and say where their parts sit."""
    buf = np.frombuffer(data, np.uint8)
    sizes = sizes.astype(np.int64)
    if int(sizes.sum()) != len(buf) or (len(sizes) and int(sizes.min()) < MIN_UNIT_BYTES):
        raise CorruptionError(f"unit sizes add up to {int(sizes.sum())}, buffer has {len(buf)}")
    ends = np.cumsum(sizes)
    starts = ends - sizes
    head = headers_of(buf, starts) if len(sizes) else np.zeros(0, HEADER_DTYPE)
    queue_offset = head["queue_offset"].astype(np.int64)
    if (bad := head["magic"] != MESSAGE_MAGIC).any():
        raise fail("bad magic", queue_offset, bad)
    if (bad := head["total_size"] != sizes).any():
        raise fail("unit size disagrees with the consume queue", queue_offset, bad)
    body_len = head["body_length"].astype(np.int64)
    if (bad := (body_len < 0) | (HEADER_SIZE + body_len + 3 > sizes)).any():
        raise fail("bad body length", queue_offset, bad)
    topic_at = starts + HEADER_SIZE + body_len
    topic_len = buf[topic_at].astype(np.int64)
    if (bad := (topic_len < 1) | (topic_at + 3 + topic_len > ends)).any():
        raise fail("bad topic length", queue_offset, bad)
    props_at = topic_at + 1 + topic_len
    props_len = _u16_at(buf, props_at)
    if (bad := props_at + 2 + props_len != ends).any():
        raise fail("unit lengths do not add up", queue_offset, bad)
    if verify_crc:
        _check_crcs(data, starts, ends, head, queue_offset)
    return UnitSpans(
        starts, ends, head, queue_offset, body_len, topic_at, topic_len, props_at, props_len
    )


def _u16_at(buf: np.ndarray, positions: np.ndarray) -> np.ndarray:
    if not len(positions):
        return np.zeros(0, np.int64)
    return sliding_window_view(buf, 2)[positions].view(">u2").ravel().astype(np.int64)


def _check_crcs(
    data: bytes | memoryview,
    starts: np.ndarray,
    ends: np.ndarray,
    head: np.ndarray,
    queue_offsets: np.ndarray,
) -> None:
    """Both CRCs of every unit: in bulk (:mod:`broker_core.protocol.crc_rows`), then one
    by one for the units of any chunk not confirmed, to name the first bad unit."""
    buf = np.frombuffer(data, np.uint8)
    body_at = starts + HEADER_SIZE
    body_length = head["body_length"].astype(np.int64)
    tail_at = body_at + body_length
    header_crc_bytes = head.view(np.uint8).reshape(-1, HEADER_SIZE)[:, CRC_START:]
    suspects = np.union1d(
        rows_to_recheck(buf, tail_at, ends - tail_at, header_crc_bytes, head["unit_crc"]),
        rows_to_recheck(buf, body_at, body_length, None, head["body_crc"]),
    )
    if len(suspects):
        _check_each(data, starts[suspects], ends[suspects], head[suspects], queue_offsets[suspects])


def _check_each(
    data: bytes | memoryview,
    starts: np.ndarray,
    ends: np.ndarray,
    head: np.ndarray,
    queue_offsets: np.ndarray,
) -> None:
    """The CRCs of the given units checked one ``zlib.crc32`` call each (the exact check)."""
    body_ends = (starts + HEADER_SIZE + head["body_length"]).tolist()
    crc32 = zlib.crc32
    for i, (start, body_end, end, unit_crc, body_crc) in enumerate(
        zip(
            starts.tolist(),
            body_ends,
            ends.tolist(),
            head["unit_crc"].tolist(),
            head["body_crc"].tolist(),
            strict=True,
        )
    ):
        if (
            crc32(data[start + CRC_START : start + HEADER_SIZE], crc32(data[body_end:end]))
            != unit_crc
        ):
            raise CorruptionError(f"unit CRC mismatch at queue offset {queue_offsets[i]}")
        if crc32(data[start + HEADER_SIZE : body_end]) != body_crc:
            raise CorruptionError(f"body CRC mismatch at queue offset {queue_offsets[i]}")
