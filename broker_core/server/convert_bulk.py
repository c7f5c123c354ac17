"""A SendBulk frame → the broker's batch of finished units (``broker.batch.UnitsBatch``).

The third converter of the send path, beside ``convert_in`` (protobuf → messages) and
``convert_columns`` (protobuf → columns); below it everything is shared
(``Sending.send_batch``, one store put, one packer). The frame already holds the units
as the commitlog will (``protocol.bulk_send``): the converter checks them as arrays
(``bulk_checks``), fills the born host (and the born time where the client left it 0)
and patches the unit CRCs for it, then hands the units on as the batch's joined units —
no unit is rebuilt. It never falls back: a frame holds plain messages only, so anything
wrong is the producer's error, named with the index of the first bad message.

Checks, all before anything is stored: the topic name; every header and tail
(``bulk_checks``: sizes, magic, the broker's fields zero, body and properties within the
store's limits, the topic bytes the request's); the properties as SendMessage's rules
accept them (``protocol.message_rules.check_encoded``: well formed, UNIQ_KEY first and
plain, TAGS and KEYS, no other system key; or, as arrays, ids alone:
``protocol.property_codec.ids_only``); each header's tag hash that of its TAGS.

Index keys (UNIQ_KEY, then KEYS) are read from the checked properties, not sent beside
the units: the broker must parse the properties anyway to refuse system keys, and keys
it derives need no check against the units. Body CRCs and unit CRCs are the client's:
the frame CRC covers transport damage, and readers verify both end to end.

>>> from broker_core.protocol.bulk_send import decode_request, encode_request
>>> frame = encode_request("t", [b"hi"], [b"UNIQ_KEY\\x01ID1\\x02TAGS\\x01a\\x02"],
...                        born_timestamp_ms=7, born_host="10.0.0.1")
>>> batch = to_column_batch(decode_request(frame), limits=Limits(1024, 1024),
...                         peer=("10.9.9.9", 5), now_ms=1)
>>> batch.topic, batch.index_keys, batch.head["born_timestamp_ms"].tolist()
('t', [['ID1']], [7])
"""

from __future__ import annotations

import struct

import numpy as np

from broker_core.broker.batch import UnitsBatch
from broker_core.errors import MessageCorruptedError
from broker_core.message import tag_hash, validate_topic_name
from broker_core.protocol import unit as layout
from broker_core.protocol import unit_crc
from broker_core.protocol.bulk_send import BulkRequest
from broker_core.protocol.message_rules import Limits, born_host, check_encoded
from broker_core.protocol.unit_builder import ip4
from broker_core.server.bulk_checks import Units, check_units, message_ids

__all__ = ["Limits", "to_column_batch"]

_BORN_HOST = struct.Struct(">4si")  # born host ip and port: side by side
_BORN_HOST_POS = layout.field_pos("born_host_ip")
_BORN_TIME = struct.Struct(">q")
_BORN_TIME_POS = layout.field_pos("born_timestamp_ms")
assert layout.field_pos("born_host_port") == _BORN_HOST_POS + 4


def to_column_batch(
    req: BulkRequest, *, limits: Limits, peer: tuple[str, int], now_ms: int
) -> UnitsBatch:
    """The broker's batch of a decoded frame; raises the first problem found (see above)."""
    validate_topic_name(req.topic)
    data = np.frombuffer(req.units, np.uint8)
    units = check_units(
        data,
        req.sizes,
        layout.topic_head(req.topic),
        max_body_bytes=limits.max_body_bytes,
        max_properties_bytes=limits.max_properties_bytes,
    )
    index_keys, id_text = _index_keys(req, units)
    head = units.head
    _fill_born(head, ip4(born_host(req.born_host, peer[0])), peer[1], now_ms)
    return UnitsBatch(
        req.topic, head, bytearray(req.units), units.starts, index_keys, id_text=id_text
    )


def _index_keys(req: BulkRequest, units: Units) -> tuple[list[list[str]], str | None]:
    """Each message's index keys, its properties checked, its tag hash compared; and the
    properties as one string when they are the ids alone, of one length
    (``UnitsBatch.id_text``)."""
    found = message_ids(units)
    tags = units.head["tags_code"]
    if found is not None:
        if tags.any():
            raise MessageCorruptedError(
                f"SendBulk: unit {int(np.flatnonzero(tags)[0])} has a tag hash but no tag"
            )
        ids, text = found
        return [[message_id] for message_id in ids], text
    index_keys = []
    for index, (start, length, code) in enumerate(
        zip(units.props_starts.tolist(), units.props_lengths.tolist(), tags.tolist(), strict=True)
    ):
        tag, keys = check_encoded(bytes(req.units[start : start + length]), index)
        if tag_hash(tag) != code:
            raise MessageCorruptedError(f"SendBulk: unit {index}'s tag hash is not its tag's")
        index_keys.append(keys)
    return index_keys, None


def _fill_born(head: np.ndarray, ip: bytes, port: int, now_ms: int) -> None:
    """Set the born host (and born time where 0: now) and patch the unit CRCs for them
    (both were zero when the client computed them)."""
    headers = head.view(np.uint8).reshape(len(head), layout.HEADER_SIZE)
    host = _BORN_HOST.pack(ip, port)
    headers[:, _BORN_HOST_POS : _BORN_HOST_POS + len(host)] = np.frombuffer(host, np.uint8)
    crcs = head["unit_crc"] ^ np.uint32(unit_crc.bytes_delta(_BORN_HOST_POS, host))
    unborn = head["born_timestamp_ms"] == 0
    if unborn.any():
        head["born_timestamp_ms"][unborn] = now_ms
        crcs[unborn] ^= np.uint32(unit_crc.bytes_delta(_BORN_TIME_POS, _BORN_TIME.pack(now_ms)))
    head["unit_crc"] = crcs
