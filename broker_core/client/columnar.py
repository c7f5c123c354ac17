"""Decode commitlog units in bulk into columns (numpy and Arrow), checking every unit.

The bulk pull (``RocketMQClient.pull_raw``) returns units exactly as the broker stores
them (the byte table is in ``broker_core.store.codec``). Decoding them one ``struct``
call and one Python object per message would cost more than everything else on the read
path, so this module decodes them as columns: the fixed header fields are gathered with
numpy fancy indexing, the variable parts (topic, body, properties) are cut out with one
boolean mask over the whole buffer, and the properties are split into tag, keys, message
id, message group and user properties with Arrow compute kernels. Python loops only run
per unit for the CRC checks (``zlib.crc32`` is per buffer) and per unit that has no
UNIQ_KEY (its offset message id).

Checks, all before anything is returned (CorruptionError names the queue offset):

* the sizes add up to the buffer, every ``total_size`` equals its size, every magic is a
  message magic, and body, topic and properties lengths add up to the unit;
* the unit CRC (topic and properties, then header bytes [12, 100)) and the body CRC,
  unless ``verify_crc=False``;
* :func:`check_placement`: units come from the queue asked for, in increasing offsets.

Pure functions; any thread.

>>> from broker_core.message import Message
>>> from broker_core.store.columns import encode_messages
>>> from broker_core.store.packer import pack_units
>>> batch = encode_messages([Message("t", b"hi", properties={"TAGS": "a", "UNIQ_KEY": "ID1"})],
...                         max_body_bytes=1024, max_properties_bytes=1024)
>>> batch.head["queue_offset"] = 7
>>> unit = pack_units(batch, 0, 1, 0, 2_000, (bytes(4), 0))
>>> cols = decode_units(unit, np.array([len(unit)], np.int32))
>>> cols.queue_offset.tolist(), cols.body.to_pylist(), cols.topic.to_pylist()
([7], [b'hi'], ['t'])
>>> props = split_properties(cols)
>>> props.tag.to_pylist(), props.message_id.to_pylist(), props.user.to_pylist()
(['a'], ['ID1'], [[]])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

from broker_core.errors import CorruptionError
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from broker_core.protocol import unit as codec
from broker_core.protocol.spans import gather_spans
from broker_core.protocol.verify import fail as _fail
from broker_core.protocol.verify import verify_units

HEADER_BYTES: Final = codec.HEADER_SIZE
_CRC_START: Final = codec.CRC_START
# codec.HEADER as a numpy record (same fields, same big-endian layout; a test compares them).
HEADER_DTYPE: Final = codec.HEADER_DTYPE
_HEX: Final = np.frombuffer(b"0123456789ABCDEF", np.uint8)


@dataclass(frozen=True, slots=True)
class UnitColumns:
    """Decoded units: one entry per message in every column, in the order received."""

    count: int
    topic: pa.Array  # string
    queue_id: np.ndarray  # int32
    queue_offset: np.ndarray  # int64
    physical_offset: np.ndarray  # int64
    born_timestamp_ms: np.ndarray  # int64
    store_timestamp_ms: np.ndarray  # int64
    body: pa.Array  # binary
    properties: pa.Array  # string, RocketMQ's encoded ``name\x01value\x02`` form
    store_host: np.ndarray  # (count, 8) uint8: IPv4 and port, for offset message ids


@dataclass(frozen=True, slots=True)
class ColumnBatch:
    """One pull of one queue as checked columns (``RocketMQClient.pull_columns``):
    ``next_offset`` is where the next pull starts, as in ``PullBatch``."""

    columns: UnitColumns
    next_offset: int

    @property
    def count(self) -> int:
        return self.columns.count


@dataclass(frozen=True, slots=True)
class PropertyColumns:
    """What the encoded properties hold, split out."""

    tag: pa.Array  # string, null when none
    message_id: pa.Array  # string: UNIQ_KEY, else the offset message id
    keys: pa.Array  # list<string>, [] when none
    message_group: pa.Array  # string, null when none
    user: pa.Array  # map<string, string>: every property that is not a system key


def _cut(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, bytes]:
    """Arrow-style offsets and data of the byte spans ``[starts[i], starts[i] + lengths[i])``
    (disjoint, in order)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets.astype(np.int32), gather_spans(buf, starts, lengths)


def _binary(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType
) -> pa.Array:
    offsets, data = _cut(buf, starts, lengths)
    array = pa.Array.from_buffers(
        pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    if kind == pa.binary():
        return array
    try:
        return array.cast(kind)
    except pa.ArrowInvalid as exc:
        raise CorruptionError(f"unit text is not UTF-8 ({exc})") from exc


def _empty_columns() -> UnitColumns:
    none = np.zeros(0, np.int64)
    return UnitColumns(
        0,
        pa.array([], pa.string()),
        none.astype(np.int32),
        none,
        none,
        none,
        none,
        pa.array([], pa.binary()),
        pa.array([], pa.string()),
        np.zeros((0, 8), np.uint8),
    )


def decode_units(data: bytes, sizes: np.ndarray, *, verify_crc: bool = True) -> UnitColumns:
    """Columns of the units in ``data`` (``sizes[i]`` bytes each, back to back)."""
    sizes = sizes.astype(np.int64)
    buf = np.frombuffer(data, np.uint8)
    at = verify_units(data, sizes, verify_crc=verify_crc)
    if not len(sizes):
        return _empty_columns()
    starts, head, queue_offset = at.starts, at.head, at.queue_offset
    body_len, topic_at, topic_len = at.body_length, at.topic_at, at.topic_length
    props_at, props_len = at.properties_at, at.properties_length
    return UnitColumns(
        count=len(sizes),
        topic=_binary(buf, topic_at + 1, topic_len, pa.string()),
        queue_id=head["queue_id"].astype(np.int32),
        queue_offset=queue_offset,
        physical_offset=head["physical_offset"].astype(np.int64),
        born_timestamp_ms=head["born_timestamp_ms"].astype(np.int64),
        store_timestamp_ms=head["store_timestamp_ms"].astype(np.int64),
        body=_binary(buf, starts + HEADER_BYTES, body_len, pa.binary()),
        properties=_binary(buf, props_at + 2, props_len, pa.string()),
        store_host=_store_hosts(head),
    )


def _store_hosts(head: np.ndarray) -> np.ndarray:
    """(count, 8) uint8: each unit's store host IPv4 and big-endian port, as stored."""
    ip = np.ascontiguousarray(head["store_host_ip"]).view(np.uint8).reshape(-1, 4)
    port = head["store_host_port"].astype(">i4").view(np.uint8).reshape(-1, 4)
    return np.concatenate([ip, port], axis=1)


def check_placement(cols: UnitColumns, topic: str, queue_id: int, first: int) -> None:
    """Every unit belongs to ``topic``:``queue_id``; offsets increase from ``first`` on.

    A consume queue pointing at the wrong unit (a stale entry after a crash) is caught
    here even when that unit's own checksums are fine.
    """
    offsets = cols.queue_offset
    if (bad := cols.queue_id != queue_id).any():
        raise _fail(f"unit of another queue than {topic}:{queue_id}", offsets, bad)
    if (bad := pc.not_equal(cols.topic, topic).to_numpy(zero_copy_only=False)).any():
        raise _fail(f"unit of another topic than {topic}", offsets, bad)
    if cols.count and (offsets[0] < first or (np.diff(offsets) <= 0).any()):
        raise CorruptionError(f"{topic}:{queue_id}: units out of order (pulled from {first})")


def _entries(properties: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Every ``name\\x01value`` pair as (names, values, row of each pair)."""
    pairs = pc.split_pattern(properties, codec.PROPERTY_SEP)
    flat = pairs.flatten()
    rows = pc.list_parent_indices(pairs).to_numpy()
    keep = pc.not_equal(flat, "")
    flat = flat.filter(keep)
    rows = rows[keep.to_numpy(zero_copy_only=False)]
    name_value = pc.split_pattern(flat, codec.NAME_VALUE_SEP, max_splits=1)
    if len(flat) and pc.min(pc.list_value_length(name_value)).as_py() < 2:
        raise CorruptionError("a stored property has no name/value separator")
    return pc.list_element(name_value, 0), pc.list_element(name_value, 1), rows


def _pick(names: pa.Array, values: pa.Array, rows: np.ndarray, count: int, name: str) -> pa.Array:
    """The value of property ``name`` in each row (null where absent; the last one wins)."""
    hit = pc.equal(names, name).to_numpy(zero_copy_only=False)
    index = np.full(count, -1, np.int64)
    index[rows[hit]] = np.arange(int(hit.sum()))
    return values.filter(pa.array(hit)).take(pa.array(index, mask=index < 0))


def _row_offsets(rows: np.ndarray, count: int) -> pa.Array:
    """List offsets for entries whose row numbers are ``rows`` (ascending)."""
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(np.bincount(rows, minlength=count), out=offsets[1:])
    return pa.array(offsets)


def offset_message_ids(cols: UnitColumns) -> pa.Array:
    """RocketMQ's offset message id of every unit: store IPv4, port, commitlog offset in hex."""
    raw = np.concatenate(
        [cols.store_host, cols.physical_offset.astype(">i8").view(np.uint8).reshape(-1, 8)], axis=1
    )
    text = np.empty((cols.count, 32), np.uint8)
    text[:, 0::2], text[:, 1::2] = _HEX[raw >> 4], _HEX[raw & 0x0F]
    offsets = np.arange(0, 32 * cols.count + 1, 32, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), cols.count, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())]
    )


_ID_ONLY_HEAD: Final = np.frombuffer(
    f"{PROPERTY_UNIQ_KEY}{codec.NAME_VALUE_SEP}".encode(), np.uint8
)
_SEPARATORS: Final = np.frombuffer(f"{codec.NAME_VALUE_SEP}{codec.PROPERTY_SEP}".encode(), np.uint8)


def _ids_only(properties: pa.Array) -> pa.Array | None:
    """The message ids when every unit's properties are exactly ``UNIQ_KEY \x01 id \x02``
    (what a producer sending bodies alone stores), checked as arrays; None otherwise."""
    count = len(properties)
    _, offsets_buf, data_buf = properties.buffers()
    if not count or offsets_buf is None or data_buf is None:
        return None
    offsets = np.frombuffer(offsets_buf, np.int32)[
        properties.offset : properties.offset + count + 1
    ]
    data = np.frombuffer(data_buf, np.uint8)[: int(offsets[-1])]
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    head = len(_ID_ONLY_HEAD)
    if int(lengths.min()) < head + 1 or int(np.isin(data, _SEPARATORS).sum()) != 2 * count:
        return None  # with one \x01 in the head and one \x02 at the end, no other pair fits
    heads = sliding_window_view(data, head)[starts]
    if (
        not (heads == _ID_ONLY_HEAD).all()
        or not (data[starts + lengths - 1] == _SEPARATORS[1]).all()
    ):
        return None
    id_lengths = lengths - head - 1
    id_offsets = np.zeros(count + 1, np.int32)
    np.cumsum(id_lengths, out=id_offsets[1:])
    text = gather_spans(data, starts + head, id_lengths)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(id_offsets), pa.py_buffer(text)]
    )


def _id_only_columns(ids: pa.Array) -> PropertyColumns:
    """The property columns of units whose only property is their message id."""
    count = len(ids)
    none = pa.array(np.zeros(count + 1, np.int32))
    strings = pa.array([], pa.string())
    return PropertyColumns(
        tag=pa.nulls(count, pa.string()),
        message_id=ids,
        keys=pa.ListArray.from_arrays(none, strings),
        message_group=pa.nulls(count, pa.string()),
        user=pa.MapArray.from_arrays(none, strings, strings),
    )


def split_properties(cols: UnitColumns, system_keys: Iterable[str] = ()) -> PropertyColumns:
    """Tag, message id, keys, message group and user properties of every unit.

    ``system_keys`` are left out of ``user`` (besides TAGS, KEYS, UNIQ_KEY and the
    message group, which always are).
    """
    n = cols.count
    ids = _ids_only(cols.properties)
    if ids is not None:
        return _id_only_columns(ids)
    names, values, rows = _entries(cols.properties)
    uniq = _pick(names, values, rows, n, PROPERTY_UNIQ_KEY)
    message_id = (
        uniq
        if uniq.null_count == 0
        else pc.if_else(pc.is_valid(uniq), uniq, offset_message_ids(cols))
    )
    raw_keys = _pick(names, values, rows, n, PROPERTY_KEYS).fill_null("")
    key_lists = pc.split_pattern(raw_keys, KEY_SEPARATOR)
    key_flat = key_lists.flatten()
    keep = pc.not_equal(key_flat, "")
    key_rows = pc.list_parent_indices(key_lists).to_numpy()[keep.to_numpy(zero_copy_only=False)]
    hidden = {PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, PROPERTY_MESSAGE_GROUP, *system_keys}
    user = pc.invert(pc.is_in(names, value_set=pa.array(sorted(hidden), pa.string())))
    user_mask = user.to_numpy(zero_copy_only=False)
    return PropertyColumns(
        tag=_pick(names, values, rows, n, PROPERTY_TAGS),
        message_id=message_id,
        keys=pa.ListArray.from_arrays(_row_offsets(key_rows, n), key_flat.filter(keep)),
        message_group=_pick(names, values, rows, n, PROPERTY_MESSAGE_GROUP),
        user=pa.MapArray.from_arrays(
            _row_offsets(rows[user_mask], n), names.filter(user), values.filter(user)
        ),
    )
