"""RocketMQ 4.x message encodings: the pull body and the batch send body.

Properties are the property codec's (:mod:`broker_core.protocol.property_codec`).

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
import socket
import struct
import zlib
from collections.abc import Iterable

from broker_core.errors import InvalidArgumentError
from broker_core.message import StoredMessage
from broker_core.protocol.property_codec import decode_text, encode_text

MESSAGE_MAGIC_CODE = 0xDAA320A7
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4

RECORD_HEAD = struct.Struct(">iIIiiqqiq8sq8siqi")  # TOTALSIZE .. BODYLEN (88 bytes)
BATCH_HEAD = struct.Struct(">iIIii")  # TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLEN
_MAX_PROPS_BYTES = 32767
PROPERTY_MSG_REGION = "MSG_REGION"
DEFAULT_REGION = "DefaultRegion"  # RocketMQ's default BrokerConfig.regionId
_REGION_ENTRY = encode_text({PROPERTY_MSG_REGION: DEFAULT_REGION})
_LOOPBACK = socket.inet_aton("127.0.0.1")


def _host_bytes(host: tuple[str, int]) -> bytes:
    try:
        ip = ipaddress.IPv4Address(host[0]).packed
    except ValueError:
        ip = _LOOPBACK  # a hostname or IPv6: version-1 records carry IPv4 only
    return ip + struct.pack(">i", host[1] & 0x7FFFFFFF)


def encode_message(msg: StoredMessage, store_host: tuple[str, int] | None = None) -> bytes:
    """One stored message in ``MessageDecoder``'s layout (see the module docstring).

    ``store_host`` replaces the stored one: 4.x clients send CONSUMER_SEND_MSG_BACK and
    VIEW_MESSAGE_BY_ID to a record's STOREHOST, so it must be the remoting address (ours
    records the gRPC one).
    """
    props = msg.properties
    topic = msg.topic.encode()
    text = encode_text(props)
    if PROPERTY_MSG_REGION not in props:
        text += _REGION_ENTRY
    prop_bytes = text.encode()
    if len(topic) > 255 or len(prop_bytes) > _MAX_PROPS_BYTES:
        raise InvalidArgumentError(f"message of {msg.topic} does not fit a 4.x record")
    total = RECORD_HEAD.size + len(msg.body) + 1 + len(topic) + 2 + len(prop_bytes)
    head = RECORD_HEAD.pack(
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


def decode_batch(data: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """A SEND_BATCH_MESSAGE body -> (flag, body, properties) per message.

    Raises ``InvalidArgumentError`` for a record whose lengths do not add up.
    """
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < BATCH_HEAD.size + 2:
            raise InvalidArgumentError(f"batch body truncated at byte {pos}")
        total, _magic, _crc, flag, body_len = BATCH_HEAD.unpack_from(data, pos)
        at = pos + BATCH_HEAD.size
        if body_len < 0 or at + body_len + 2 > len(data) or total < BATCH_HEAD.size + 2:
            raise InvalidArgumentError(f"batch record at byte {pos}: bad body length {body_len}")
        body = data[at : at + body_len]
        at += body_len
        (props_len,) = struct.unpack_from(">H", data, at)
        at += 2
        if at + props_len > len(data) or at + props_len - pos != total:
            raise InvalidArgumentError(f"batch record at byte {pos}: lengths do not add up")
        props = decode_text(data[at : at + props_len].decode("utf-8", "replace"))
        out.append((flag, body, props))
        pos += total
    return out


def uncompress_body(body: bytes, sys_flag: int) -> tuple[bytes, int]:
    """A body a producer zlib-compressed (sysFlag bit 0) comes back plain, the bit cleared."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body, sys_flag
    try:
        return zlib.decompress(body), sys_flag & ~SYSFLAG_COMPRESSED
    except zlib.error as exc:
        raise InvalidArgumentError(f"compressed body does not inflate: {exc}") from None
