"""A SendBulk frame → the column batch SendMessage's plain messages become.

The third converter of the send path, beside ``convert_in`` (protobuf → messages) and
``convert_columns`` (protobuf → columns); below it everything is shared
(``Broker.send_columns``, one store put, one packer). It shares the column converter's
checks (``_plain``, the size limits of ``encode_columns``, the system-key registry) and,
unlike it, never falls back: a frame holds plain messages only, so anything wrong is the
producer's error, named with the index of the first bad message.

Checks, all before anything is stored: the topic name; every body's CRC recomputed and
compared; the properties UTF-8 and well formed (``name \\x01 value \\x02`` pairs, no NUL),
UNIQ_KEY first and plain, TAGS and KEYS as SendMessage accepts them, no other system key,
sizes within the store's limits.

>>> from broker_core.protocol.bulk_send import decode_request, encode_request
>>> frame = encode_request("t", [b"hi"], [b"UNIQ_KEY\\x01ID1\\x02TAGS\\x01a\\x02"],
...                        born_timestamp_ms=7, born_host="10.0.0.1")
>>> batch = to_column_batch(decode_request(frame), limits=Limits(1024, 1024),
...                         peer=("10.9.9.9", 5), now_ms=1)
>>> batch.topic, batch.index_keys, batch.born_ms.tolist()
('t', [['ID1']], [7])
"""

from __future__ import annotations

import zlib

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from broker_core.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    InvalidMessageIdError,
    InvalidPropertyError,
    InvalidTagError,
    MessageCorruptedError,
)
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    tag_hash,
    validate_topic_name,
)
from broker_core.protocol.bulk_send import BulkRequest
from broker_core.protocol.properties import SYSTEM_PROPERTY_KEYS
from broker_core.server.convert_columns import _MAX_PROPERTY_KEY_CHARS, _plain
from broker_core.server.convert_in import MAX_MESSAGE_ID_CHARS, MAX_TAG_CHARS, Limits, _born_host
from broker_core.store.columns import ColumnBatch, encode_columns

__all__ = ["Limits", "to_column_batch"]


def _check_crcs(req: BulkRequest) -> None:
    crcs = np.fromiter(map(zlib.crc32, req.bodies), np.uint32, len(req.bodies))
    bad = np.flatnonzero(crcs != req.body_crcs)
    if len(bad):
        raise MessageCorruptedError(f"SendBulk: body CRC mismatch at message {int(bad[0])}")


_ID_ONLY_HEAD = f"{PROPERTY_UNIQ_KEY}\x01".encode()
_BLANK = np.zeros(256, bool)  # per byte value: str.isspace, ASCII (a table: np.isin is slow)
_BLANK[np.frombuffer(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f", np.uint8)] = True


def _ids_only(req: BulkRequest) -> list[str] | None:
    """Every message id when every message's properties are ``UNIQ_KEY \x01 id \x02`` with
    a plain ASCII id (what our client sends for bodies alone), checked as arrays over
    the whole properties block; None when any message holds more (or anything odd)."""
    block = b"".join(req.properties)
    data = np.frombuffer(block, np.uint8)
    lengths = np.fromiter(map(len, req.properties), np.int64, len(req.properties))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    head = len(_ID_ONLY_HEAD)
    id_lengths = lengths - head - 1
    if (
        int(id_lengths.min()) < 1
        or int(id_lengths.max()) > MAX_MESSAGE_ID_CHARS
        or int(data.max()) >= 0x80
        or int(data.min()) == 0
    ):
        return None
    seps = np.flatnonzero(data < 3)  # \x01 and \x02: exactly one of each per message
    expected = np.empty(2 * len(starts), np.int64)
    expected[0::2], expected[1::2] = starts + head - 1, ends - 1
    if (
        len(seps) != len(expected)
        or not np.array_equal(seps, expected)
        or not (data[expected[0::2]] == 1).all()
    ):
        return None
    heads = sliding_window_view(data, head)[starts]
    if not (heads == np.frombuffer(_ID_ONLY_HEAD, np.uint8)).all():
        return None
    blank = _BLANK[data]
    if blank.any():  # rare: then each id needs some byte other than a space
        visible = np.zeros(len(data) + 1, np.int64)
        np.cumsum(~blank, out=visible[1:])
        if (visible[ends - 1] - visible[starts + head] < 1).any():
            return None
    text = block.decode("ascii")
    return [text[a:b] for a, b in zip((starts + head).tolist(), (ends - 1).tolist(), strict=True)]


def _keys_of(index: int, raw: bytes) -> tuple[str | None, list[str]]:
    """(tag, [message id, *keys]) of one message's encoded properties."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MessageCorruptedError(
            f"SendBulk: properties of message {index} are not UTF-8"
        ) from None
    pairs = text[:-1].split("\x02")
    if not text.endswith("\x02") or "\x00" in text:
        raise InvalidPropertyError(f"SendBulk: properties of message {index} are malformed")
    tag: str | None = None
    keys: list[str] = []
    for position, pair in enumerate(pairs):
        name, sep, value = pair.partition("\x01")
        if not sep or "\x01" in value:
            raise InvalidPropertyError(
                f"SendBulk: property {pair!r} of message {index} is not name\\x01value"
            )
        if position == 0:
            if name != PROPERTY_UNIQ_KEY or not _plain(value, MAX_MESSAGE_ID_CHARS):
                raise InvalidMessageIdError(
                    f"SendBulk: message {index} needs a message id (UNIQ_KEY, first)"
                )
            keys.insert(0, value)
        elif name == PROPERTY_TAGS and tag is None:
            if not _plain(value, MAX_TAG_CHARS) or "|" in value:
                raise InvalidTagError(f"SendBulk: bad tag {value!r} of message {index}")
            tag = value
        elif name == PROPERTY_KEYS and len(keys) == 1:
            extra = value.split(KEY_SEPARATOR)
            if not all(_plain(key, MAX_TAG_CHARS) for key in extra):
                raise InvalidKeyError(f"SendBulk: bad keys {value!r} of message {index}")
            keys.extend(extra)
        elif not _plain(name, _MAX_PROPERTY_KEY_CHARS) or name in SYSTEM_PROPERTY_KEYS:
            raise InvalidPropertyError(f"SendBulk: message {index} may not set property {name!r}")
    return tag, keys


def to_column_batch(
    req: BulkRequest, *, limits: Limits, peer: tuple[str, int], now_ms: int
) -> ColumnBatch:
    """The column batch of a decoded frame; raises the first problem found (see above)."""
    validate_topic_name(req.topic)
    if req.born_timestamp_ms < 0:
        raise InvalidArgumentError(f"SendBulk: born_timestamp_ms {req.born_timestamp_ms} < 0")
    _check_crcs(req)
    ids = _ids_only(req)
    if ids is not None:
        tags_codes = [0] * len(ids)
        index_keys = [[message_id] for message_id in ids]
    else:
        tags_codes, index_keys = [], []
        for index, raw in enumerate(req.properties):
            tag, keys = _keys_of(index, raw)
            tags_codes.append(tag_hash(tag))
            index_keys.append(keys)
    born = req.born_timestamp_ms or now_ms
    return encode_columns(
        req.topic,
        req.bodies,
        req.properties,
        body_crcs=req.body_crcs.tolist(),
        tags_codes=tags_codes,
        born_ms=[born] * len(req.bodies),
        born_host=(_born_host(req.born_host, peer[0]), peer[1]),
        index_keys=index_keys,
        max_body_bytes=limits.max_body_bytes,
        max_properties_bytes=limits.max_properties_bytes,
    )
