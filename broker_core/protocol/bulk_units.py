"""A producer's side of SendBulk: plain messages as finished commitlog units, built as arrays.

Each unit is laid out as :mod:`broker_core.protocol.unit` says and as the broker will
store it, but for the fields the broker fills: the open fields
(:data:`~broker_core.protocol.unit_crc.OPEN_FIELDS`) and the born host stay zero, and
``unit_crc`` is the CRC with them zero (the broker patches it,
:mod:`broker_core.protocol.unit_crc`). Plain messages only: flag, sys_flag, reconsume
times and prepared-transaction offset are zero.

Headers are built as one array of :data:`~broker_core.protocol.unit.HEADER_DTYPE`
records, by the builder the broker's own plain units use
(:mod:`broker_core.protocol.unit_builder`); when every body has one length and every
properties one length (a sender of bodies alone: ids of one length), the units are
assembled as the rows of one 2-D array, else joined once. The CRCs are one
``zlib.crc32`` call per body and per unit, but for rows of one length that differ in a
few columns only (ids of one length, equal bodies): those are
:func:`~broker_core.protocol.row_crc.row_crcs`' one call and a patch.

>>> units, sizes = build_units("t", [b"hi"], [b"UNIQ_KEY\\x01A\\x02"], born_timestamp_ms=5)
>>> sizes.tolist(), units[100:102], units[-15:]
([117], b'hi', b'\\x01t\\x00\\x0bUNIQ_KEY\\x01A\\x02')
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from broker_core.message import PROPERTY_TAGS, tag_hash
from broker_core.protocol import unit as layout
from broker_core.protocol.property_codec import mark, value_of
from broker_core.protocol.row_crc import row_crcs
from broker_core.protocol.unit_builder import plain_head, plain_tails, unit_sizes

_TAGS_MARK = mark(PROPERTY_TAGS)


def tags_codes_of(properties: Sequence[bytes]) -> list[int]:
    """Each message's tag hash, from the TAGS property where its encoded properties
    have one; 0 where none."""
    return [tag_hash(value_of(props, _TAGS_MARK) or None) for props in properties]


def build_units(
    topic: str,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | np.ndarray,
    *,
    born_timestamp_ms: int,
    tags_codes: Sequence[int] | None = None,
) -> tuple[bytes, np.ndarray]:
    """(the units back to back, each unit's size as int64) of plain messages of ``topic``:
    ``properties`` encoded as stored, one per body (bytes each, or the rows of a 2-D
    uint8 array); ``tags_codes`` default to the TAGS found in them."""
    head_bytes = layout.topic_head(topic)
    count = len(bodies)
    two_d = isinstance(properties, np.ndarray)
    if two_d:
        rows = np.ascontiguousarray(properties, np.uint8)
        prop_lens = np.full(count, rows.shape[1], np.int64)
        tails: list[bytes] | np.ndarray = _tail_rows(head_bytes, rows)
    else:
        prop_list = list(properties)
        prop_lens = np.fromiter(map(len, prop_list), np.int64, count)
        tails = plain_tails(head_bytes, prop_list)
    if tags_codes is None:
        tags_codes = [0] * count if two_d else tags_codes_of(prop_list)
    body_lens = np.fromiter(map(len, bodies), np.int64, count)
    sizes = unit_sizes(body_lens, len(head_bytes) + 2 + prop_lens)
    body_rows = _body_rows(bodies, body_lens) if isinstance(tails, np.ndarray) else None
    if body_rows is None:
        body_crcs = np.fromiter(map(zlib.crc32, bodies), np.uint32, count)
    else:
        body_crcs = row_crcs(body_rows)
    head = plain_head(sizes, body_lens, body_crcs, born_ms=born_timestamp_ms, tags_codes=tags_codes)
    headers = head.view(np.uint8).reshape(count, layout.HEADER_SIZE)
    head["unit_crc"] = _unit_crcs(headers, tails)
    if isinstance(tails, np.ndarray) and body_rows is not None:
        return _as_rows(headers, body_rows, tails), sizes
    raw = headers.tobytes()
    size = layout.HEADER_SIZE
    pieces: list[bytes] = []
    tail_list = [row.tobytes() for row in tails] if isinstance(tails, np.ndarray) else tails
    for at, body, tail in zip(range(0, len(raw), size), bodies, tail_list, strict=True):
        pieces += (raw[at : at + size], body, tail)
    return b"".join(pieces), sizes


def _tail_rows(head_bytes: bytes, rows: np.ndarray) -> np.ndarray:
    """The tails of properties of one length, as the rows of a 2-D array."""
    width = len(head_bytes) + 2 + rows.shape[1]
    tails = np.empty((len(rows), width), np.uint8)
    tails[:, : len(head_bytes) + 2] = np.frombuffer(
        head_bytes + rows.shape[1].to_bytes(2, "big"), np.uint8
    )
    tails[:, len(head_bytes) + 2 :] = rows
    return tails


def _unit_crcs(headers: np.ndarray, tails: list[bytes] | np.ndarray) -> np.ndarray:
    """Each unit's CRC: its tail, then header bytes [12, 100) (the open fields zero)."""
    crc32, start = zlib.crc32, layout.CRC_START
    if isinstance(tails, np.ndarray):  # one row per unit: tail then header span
        return row_crcs(np.concatenate((tails, headers[:, start:]), axis=1))
    else:
        spans = memoryview(headers.tobytes())
        size = layout.HEADER_SIZE
        crcs = (
            crc32(spans[at + start : at + size], crc32(tail))
            for at, tail in zip(range(0, len(spans), size), tails, strict=True)
        )
    return np.fromiter(crcs, np.uint32, len(headers))


def _body_rows(bodies: Sequence[bytes], body_lens: np.ndarray) -> np.ndarray | None:
    """The bodies as the rows of one 2-D uint8 array when all have one length, else None."""
    if not len(body_lens) or int(body_lens.min()) != int(body_lens.max()):
        return None
    return np.frombuffer(b"".join(bodies), np.uint8).reshape(len(body_lens), int(body_lens[0]))


def _as_rows(headers: np.ndarray, body_rows: np.ndarray, tails: np.ndarray) -> bytes:
    """Units of one size, assembled as the rows of one array."""
    count, size, body_length = len(headers), layout.HEADER_SIZE, body_rows.shape[1]
    units = np.empty((count, size + body_length + tails.shape[1]), np.uint8)
    units[:, :size] = headers
    units[:, size : size + body_length] = body_rows
    units[:, size + body_length :] = tails
    return units.tobytes()
