"""The message ids and queue offsets of raw units (a raw pull's answer), read as columns.

A traced raw pull needs, per unit, its queue offset (header bytes 24..32) and its id (the
``UNIQ_KEY`` property). The header fields are gathered for every unit at once with numpy;
the ids too when every unit's properties start with ``UNIQ_KEY`` and its ids are of one
length (what every client this broker knows writes: the id first, a fixed-width id), else
one bounded ``find`` per unit. Units as stored, back to back (``RawUnits``)::

    unit  header (100 B) | body | topic length (1 B) | topic | props length (2 B) | props
    props "UNIQ_KEY" 0x01 id 0x02 ...   (an id holds neither 0x01 nor 0x02)

>>> from broker_core.message import Message
>>> from broker_core.store.columns import encode_messages
>>> def units(*ids):
...     b = encode_messages([Message("t", b"x", 0, {"UNIQ_KEY": i, "a": "b"}) for i in ids],
...                         max_body_bytes=64, max_properties_bytes=64)
...     return bytes(b.units), b.sizes
>>> raw_ids(*units("ID7", "ID8"))  # one width: as columns
(['ID7', 'ID8'], [0, 0])
>>> raw_ids(*units("ID7", "ID10", ""))[0]  # widths differ, no id: unit by unit
['ID7', 'ID10', '']
"""

from __future__ import annotations

import struct

import numpy as np

from broker_core.protocol import unit as layout
from broker_core.protocol.property_codec import ID_HEAD, PROPERTY_SEP_BYTES

_MARK = ID_HEAD
_MARK_ROW = np.frombuffer(_MARK, np.uint8)
_QUEUE_OFFSET = 24  # header bytes of the queue offset (``protocol.unit``)
_BODY_LENGTH = 96  # and of the body length


def _gather(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``at``, one row each."""
    return buf[at[:, None] + np.arange(width)]


def _starts(sizes: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def raw_offsets(data: bytes, sizes: np.ndarray) -> np.ndarray:
    """Each unit's queue offset (int64), of units back to back."""
    if not len(sizes):
        return np.zeros(0, np.int64)
    buf = np.frombuffer(data, np.uint8)
    return _gather(buf, _starts(sizes) + _QUEUE_OFFSET, 8).copy().view(">i8").ravel()


_OFFSET_AT = struct.Struct(">q")


def raw_span(data: bytes, sizes: np.ndarray) -> tuple[int, int]:
    """(the first unit's queue offset, the last's) of units back to back, in O(1).

    The units of one queue's pull are in queue order, offsets strictly increasing: they are
    consecutive exactly when ``last - first == count - 1``, which a traced pull checks
    without reading every header.

    >>> unit = lambda offset: bytes(24) + struct.pack(">q", offset) + bytes(8)  # 40 B each
    >>> raw_span(unit(7) + unit(8) + unit(9), np.array([40, 40, 40], np.int32))
    (7, 9)
    """
    if not len(sizes):
        raise ValueError("no units")
    first = _OFFSET_AT.unpack_from(data, _QUEUE_OFFSET)[0]
    last = _OFFSET_AT.unpack_from(data, len(data) - int(sizes[-1]) + _QUEUE_OFFSET)[0]
    return first, last


def raw_ids(data: bytes, sizes: np.ndarray) -> tuple[list[str], list[int]]:
    """(each unit's id, "" without one; each unit's queue offset) of units back to back."""
    count = len(sizes)
    if not count:
        return [], []
    buf = np.frombuffer(data, np.uint8)
    starts = _starts(sizes)
    offsets = raw_offsets(data, sizes)
    body = _gather(buf, starts + _BODY_LENGTH, 4).copy().view(">i4").ravel()
    at = starts + layout.HEADER_SIZE + body
    at += 1 + buf[at]  # past the topic
    props_end = at + 2 + (buf[at].astype(np.int64) << 8 | buf[at + 1])
    props = at + 2
    ids = _uniform_ids(buf, props, props_end) or _found_ids(data, props, props_end)
    return ids, offsets.tolist()


def _uniform_ids(buf: np.ndarray, props: np.ndarray, ends: np.ndarray) -> list[str] | None:
    """The ids when every unit's properties start with the id and all ids are as long as
    the first; None otherwise."""
    mark = len(_MARK)
    if int((ends - props).min()) < mark + 1:
        return None
    if not (_gather(buf, props, mark) == _MARK_ROW).all():
        return None
    first = int(props[0]) + mark
    stop = buf[first : int(ends[0])].tobytes().find(PROPERTY_SEP_BYTES)
    width = stop if stop >= 0 else int(ends[0]) - first
    after = props + mark + width
    if width <= 0 or bool((after > ends).any()):
        return None
    cells = _gather(buf, props + mark, width)
    if bool(((cells == 1) | (cells == 2)).any()):
        return None  # a shorter id somewhere: its 0x02 falls inside the cell
    inside = after < ends
    if bool((buf[after[inside]] != 2).any()):
        return None  # a longer id somewhere
    text = cells.tobytes().decode()
    return [text[i : i + width] for i in range(0, len(text), width)]


def _found_ids(data: bytes, props: np.ndarray, ends: np.ndarray) -> list[str]:
    """The ids found one unit at a time (the property at the start or after a 0x02)."""
    ids = []
    for start, end in zip(props.tolist(), ends.tolist(), strict=True):
        at = data.find(_MARK, start, end)
        while at > start and data[at - 1] != 2:
            at = data.find(_MARK, at + 1, end)
        if at < 0:
            ids.append("")
            continue
        at += len(_MARK)
        stop = data.find(PROPERTY_SEP_BYTES, at, end)
        ids.append(data[at : stop if stop >= 0 else end].decode())
    return ids
