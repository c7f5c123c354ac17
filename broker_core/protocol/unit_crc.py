"""Patching unit CRCs for header fields filled after the CRC was computed: no CRC call per unit.

A unit's CRC (``unit_crc``, see :mod:`broker_core.protocol.unit`) is zlib's CRC-32 of the
tail (topic, properties) followed by header bytes [12, 100). CRC-32 is affine over GF(2):
for messages ``x`` and ``d`` of one length, ``crc(x ^ d) = crc(x) ^ L(d)``, where ``L`` is
the CRC register's linear part (no initial register, no final XOR):
``L(d) = crc(d) ^ crc(zeros of len(d))``. The changed bytes all lie in the last 88 bytes
of the message (the header part), and leading zero bytes leave ``L`` at zero, so ``L(d)``
depends only on those 88 bytes of delta, whatever the tail's length. Being linear,
``L(d)`` is the XOR over the changed positions ``p`` of ``TABLE[p][d[p]]``, a table made
once here (88 × 256 uint32).

So whoever fills header fields after the CRC was computed (the broker's queue id, offsets,
store time and host, a bulk frame's born host) patches every CRC of a run with one numpy
gather and one XOR reduction (:func:`patch`), or, for a single unit, with one
``zlib.crc32`` of the 88-byte delta (:func:`patch_one`).

:data:`OPEN_FIELDS` are the header fields the store fills at the append: encoders compute
``unit_crc`` with them zero (:func:`open_zero_crc`), the packer fills and patches them.

>>> import zlib
>>> tail, header = b"\\x01t\\x00\\x00", bytearray(100)
>>> before = open_zero_crc(header, zlib.crc32(tail))
>>> header[24:32] = (7).to_bytes(8, "big")  # a queue offset
>>> patch_one(before, bytes(header[12:100])) == zlib.crc32(header[12:100], zlib.crc32(tail))
True
"""

from __future__ import annotations

import zlib
from typing import Final

import numpy as np

from broker_core.protocol import unit as layout

SPAN_START: Final = layout.CRC_START  # header bytes [12, 100) are covered by the CRC
SPAN: Final = layout.HEADER_SIZE - SPAN_START
_ZERO_SPAN_CRC: Final = zlib.crc32(bytes(SPAN))

OPEN_FIELDS: Final = (
    "queue_id",
    "queue_offset",
    "physical_offset",
    "store_timestamp_ms",
    "store_host_ip",
    "store_host_port",
)


def field_positions(names: tuple[str, ...]) -> np.ndarray:
    """The header byte positions (in the 100-byte header) of ``names``' fields, ascending."""
    fields = layout.HEADER_DTYPE.fields
    assert fields is not None
    out: list[int] = []
    for name in names:
        dtype, pos = fields[name][0], int(fields[name][1])
        out += range(pos, pos + dtype.itemsize)
    return np.array(sorted(out), np.int64)


OPEN_POSITIONS: Final = field_positions(OPEN_FIELDS)
_OPEN_MASK: Final = int.from_bytes(
    bytes(0xFF if SPAN_START + i in set(OPEN_POSITIONS.tolist()) else 0 for i in range(SPAN)),
    "big",
)
_KEEP_MASK: Final = ((1 << (8 * SPAN)) - 1) ^ _OPEN_MASK


def _table() -> np.ndarray:
    """TABLE[p][b]: ``L`` of the 88 delta bytes that are zero but ``b`` at position ``p``;
    built from the 88 × 8 single-bit deltas by linearity."""
    base = np.empty((SPAN, 8), np.uint32)
    for pos in range(SPAN):
        for bit in range(8):
            delta = bytearray(SPAN)
            delta[pos] = 1 << bit
            base[pos, bit] = zlib.crc32(delta) ^ _ZERO_SPAN_CRC
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # (256, 8)
    picked = np.where(bits[None, :, :] == 1, base[:, None, :], np.uint32(0))
    return np.bitwise_xor.reduce(picked, axis=2).astype(np.uint32)  # (88, 256)


TABLE: Final = _table()
_FLAT: Final = TABLE.ravel()


def delta_crcs(delta: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``L`` of each row's delta: ``delta`` is (units, len(positions)) uint8, the XOR of
    old and new header bytes at header ``positions`` (each in [12, 100))."""
    if not len(delta):
        return np.zeros(0, np.uint32)
    index = delta.astype(np.intp)  # into the flat table: row p starts at p * 256
    index += (positions - SPAN_START).astype(np.intp) << 8
    return np.bitwise_xor.reduce(_FLAT[index], axis=1).astype(np.uint32)


def patch(crcs: np.ndarray, headers: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The CRCs of units whose header bytes at ``positions`` were zero when ``crcs`` were
    computed and now are ``headers[:, positions]`` (``headers``: (units, 100) uint8)."""
    return np.asarray(crcs, np.uint32) ^ delta_crcs(headers[:, positions], positions)


def patch_one(crc: int, delta_span: bytes) -> int:
    """One unit's CRC patched by ``delta_span``: the 88-byte XOR of old and new header
    bytes [12, 100) (zeros where nothing changed)."""
    return crc ^ zlib.crc32(delta_span) ^ _ZERO_SPAN_CRC


def bytes_delta(pos: int, value: bytes) -> int:
    """What writing ``value`` at header position ``pos`` (in [12, 100), zero before) adds
    to a unit CRC."""
    span = bytearray(SPAN)
    at = pos - SPAN_START
    span[at : at + len(value)] = value
    return patch_one(0, bytes(span))


def open_part(span: bytes | bytearray | memoryview) -> bytes:
    """Header bytes [12, 100) with everything but the open fields zeroed."""
    return (int.from_bytes(span, "big") & _OPEN_MASK).to_bytes(SPAN, "big")


def open_zero_crc(header: bytes | bytearray | memoryview, tail_crc: int) -> int:
    """The unit CRC of a 100-byte ``header`` with its open fields taken as zero."""
    span = (int.from_bytes(header[SPAN_START:], "big") & _KEEP_MASK).to_bytes(SPAN, "big")
    return zlib.crc32(span, tail_crc)
