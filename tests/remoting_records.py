"""Test-side 4.x record codecs: what a 4.x producer sends and reading a pull body back.

The broker decodes SEND_BATCH_MESSAGE bodies and encodes pull bodies
(``broker_core.remoting_broker.msgcodec``); these are the other two directions, which
only tests and the benchmarks need: :func:`encode_batch` (a 4.x producer's
``MessageDecoder.encodeMessages``) and :func:`decode_stored` (a 4.x consumer's
``MessageDecoder.decodes``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from broker_core.protocol.property_codec import decode_text, encode_text
from broker_core.remoting_broker.msgcodec import BATCH_HEAD, RECORD_HEAD

_PROPS_LEN = struct.Struct(">H")


def decode_stored(data: bytes) -> list[dict[str, object]]:
    """Parse a pull body back: one dict per record."""
    out: list[dict[str, object]] = []
    pos = 0
    while pos < len(data):
        fields = RECORD_HEAD.unpack_from(data, pos)
        total, body_len = fields[0], fields[14]
        at = pos + RECORD_HEAD.size
        body = data[at : at + body_len]
        at += body_len
        topic_len = data[at]
        topic = data[at + 1 : at + 1 + topic_len].decode()
        at += 1 + topic_len
        (props_len,) = _PROPS_LEN.unpack_from(data, at)
        props = decode_text(data[at + 2 : at + 2 + props_len].decode())
        out.append(
            {
                "magic": fields[1],
                "body_crc": fields[2],
                "queue_id": fields[3],
                "queue_offset": fields[5],
                "physical_offset": fields[6],
                "reconsume_times": fields[12],
                "body": body,
                "topic": topic,
                "properties": props,
                "total": total,
            }
        )
        pos += total
    return out


def encode_batch(items: Iterable[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """The inverse of ``msgcodec.decode_batch``: what a 4.x producer sends."""
    parts = []
    for flag, body, props in items:
        prop_bytes = encode_text(props).encode()
        total = BATCH_HEAD.size + len(body) + 2 + len(prop_bytes)
        parts.append(
            BATCH_HEAD.pack(total, 0, 0, flag, len(body))
            + body
            + _PROPS_LEN.pack(len(prop_bytes))
            + prop_bytes
        )
    return b"".join(parts)
