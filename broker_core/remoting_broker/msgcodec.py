"""RocketMQ 4.x message encodings: properties, the pull body and the batch send body.

Properties (``MessageDecoder.messageProperties2String``): ``key\\x01value\\x02`` repeated.

Pull body: the messages one after another, each in ``MessageDecoder``'s stored layout
(version 1, IPv4 hosts), re-encoded from our stored messages (our commitlog unit has its
own magic and a unit CRC, so its bytes cannot be sent as they are). Big-endian::

    offset  size  field
    0       4     TOTALSIZE            the whole record, these 4 bytes included
    4       4     MAGICCODE            0xDAA320A7 (MESSAGE_MAGIC_CODE)
    8       4     BODYCRC              CRC32 of the body
    12      4     QUEUEID
    16      4     FLAG
    20      8     QUEUEOFFSET
    28      8     PHYSICALOFFSET       commitlog offset (CONSUMER_SEND_MSG_BACK names it)
    36      4     SYSFLAG              bit 0 compressed (never: we store bodies plain)
    40      8     BORNTIMESTAMP        ms
    48      8     BORNHOST             4-byte IPv4 + int32 port
    56      8     STORETIMESTAMP       ms
    64      8     STOREHOST            4-byte IPv4 + int32 port: the remoting listener
    72      4     RECONSUMETIMES
    76      8     PREPAREDTRANSACTIONOFFSET
    84      4     BODYLEN, then the body
    ..      1     TOPICLEN, then the topic (UTF-8)
    ..      2     PROPERTIESLEN, then the properties string (UTF-8)

Every record carries ``MSG_REGION`` (``DefaultRegion`` unless the message has its own), as
RocketMQ's broker stores it on every message: a 4.x consumer with message trace on drops
the SubBefore/SubAfter records of a message without a region, so without it
``queryMsgTraceById`` would show no consumer.

Batch send body (``MessageDecoder.encodeMessages``), per message::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | FLAG 4 | BODYLEN 4 + BODY | PROPLEN 2 + PROPS
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Iterable

from broker_core.errors import InvalidArgumentError
from broker_core.message import StoredMessage

MESSAGE_MAGIC_CODE = 0xDAA320A7
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4

_HEAD = struct.Struct(">iIIiiqqiq8sq8siqi")  # TOTALSIZE .. BODYLEN (88 bytes)
_BATCH_HEAD = struct.Struct(">iIIii")  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN
_MAX_PROPS_BYTES = 32767
PROPERTY_MSG_REGION = "MSG_REGION"
DEFAULT_REGION = "DefaultRegion"  # RocketMQ's default BrokerConfig.regionId
_REGION_ENTRY = f"{PROPERTY_MSG_REGION}{NAME_VALUE_SEPARATOR}{DEFAULT_REGION}{PROPERTY_SEPARATOR}"


def decode_properties(text: str) -> dict[str, str]:
    """``k\\x01v\\x02...`` -> dict; entries without a separator are skipped, as Java does."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key:
            out[key] = value
    return out


def encode_properties(props: dict[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def _host_bytes(host: tuple[str, int]) -> bytes:
    try:
        ip = ipaddress.IPv4Address(host[0]).packed
    except ValueError:
        ip = b"\x7f\x00\x00\x01"  # a hostname or IPv6: version-1 records carry IPv4 only
    return ip + struct.pack(">i", host[1] & 0x7FFFFFFF)


def encode_message(msg: StoredMessage, store_host: tuple[str, int] | None = None) -> bytes:
    """One stored message in ``MessageDecoder``'s layout (see the module docstring).

    ``store_host`` replaces the stored one: 4.x clients send CONSUMER_SEND_MSG_BACK and
    VIEW_MESSAGE_BY_ID to a record's STOREHOST, so it must be the remoting address (ours
    records the gRPC one).
    """
    props = msg.properties
    topic = msg.topic.encode()
    text = encode_properties(props)
    if PROPERTY_MSG_REGION not in props:
        text += _REGION_ENTRY
    prop_bytes = text.encode()
    if len(topic) > 255 or len(prop_bytes) > _MAX_PROPS_BYTES:
        raise InvalidArgumentError(f"message of {msg.topic} does not fit a 4.x record")
    total = _HEAD.size + len(msg.body) + 1 + len(topic) + 2 + len(prop_bytes)
    head = _HEAD.pack(
        total,
        MESSAGE_MAGIC_CODE,
        zlib.crc32(msg.body) & 0x7FFFFFFF,
        msg.queue_id,
        msg.flag,
        msg.queue_offset,
        msg.physical_offset,
        msg.sys_flag & ~SYSFLAG_COMPRESSED,
        msg.born_timestamp_ms,
        _host_bytes(msg.born_host),
        msg.store_timestamp_ms,
        _host_bytes(store_host or msg.store_host),
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(msg.body),
    )
    return b"".join(
        (
            head,
            msg.body,
            bytes((len(topic),)),
            topic,
            struct.pack(">H", len(prop_bytes)),
            prop_bytes,
        )
    )


def encode_messages(
    msgs: Iterable[StoredMessage], store_host: tuple[str, int] | None = None
) -> bytes:
    return b"".join(encode_message(m, store_host) for m in msgs)


def decode_stored(data: bytes) -> list[dict[str, object]]:
    """Parse a pull body back (for tests and our own tools): one dict per record."""
    out: list[dict[str, object]] = []
    pos = 0
    while pos < len(data):
        fields = _HEAD.unpack_from(data, pos)
        total, body_len = fields[0], fields[14]
        at = pos + _HEAD.size
        body = data[at : at + body_len]
        at += body_len
        topic_len = data[at]
        topic = data[at + 1 : at + 1 + topic_len].decode()
        at += 1 + topic_len
        (props_len,) = struct.unpack_from(">H", data, at)
        props = decode_properties(data[at + 2 : at + 2 + props_len].decode())
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


def decode_batch(data: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """A SEND_BATCH_MESSAGE body -> (flag, body, properties) per message.

    Raises ``InvalidArgumentError`` for a record whose lengths do not add up.
    """
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _BATCH_HEAD.size + 2:
            raise InvalidArgumentError(f"batch body truncated at byte {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
        at = pos + _BATCH_HEAD.size
        if body_len < 0 or at + body_len + 2 > len(data) or total < _BATCH_HEAD.size + 2:
            raise InvalidArgumentError(f"batch record at byte {pos}: bad body length {body_len}")
        body = data[at : at + body_len]
        at += body_len
        (props_len,) = struct.unpack_from(">H", data, at)
        at += 2
        if at + props_len > len(data) or at + props_len - pos != total:
            raise InvalidArgumentError(f"batch record at byte {pos}: lengths do not add up")
        props = decode_properties(data[at : at + props_len].decode("utf-8", "replace"))
        out.append((flag, body, props))
        pos += total
    return out


def encode_batch(items: Iterable[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """The inverse of :func:`decode_batch` (what a 4.x producer sends; for tests/bench)."""
    parts = []
    for flag, body, props in items:
        prop_bytes = encode_properties(props).encode()
        total = _BATCH_HEAD.size + len(body) + 2 + len(prop_bytes)
        parts.append(
            _BATCH_HEAD.pack(total, 0, 0, flag, len(body))
            + body
            + struct.pack(">H", len(prop_bytes))
            + prop_bytes
        )
    return b"".join(parts)


def uncompress_body(body: bytes, sys_flag: int) -> tuple[bytes, int]:
    """A body a producer zlib-compressed (sysFlag bit 0) comes back plain, the bit cleared."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body, sys_flag
    try:
        return zlib.decompress(body), sys_flag & ~SYSFLAG_COMPRESSED
    except zlib.error as exc:
        raise InvalidArgumentError(f"compressed body does not inflate: {exc}") from None
