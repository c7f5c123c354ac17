"""The commitlog message unit: one message as it sits on disk.

All integers are big-endian. One unit::

    offset size field
    0      4    total_size                 int32   bytes of the whole unit, this field included
    4      4    magic                      uint32  MESSAGE_MAGIC, or BLANK_MAGIC for end-of-segment
    8      4    unit_crc                   uint32  CRC32 of bytes [12, 100) + topic/properties tail
    12     4    body_crc                   uint32  CRC32 of the body
    16     4    queue_id                   int32
    20     4    flag                       int32   producer's flag, opaque to the store
    24     8    queue_offset               int64   logical offset in its consume queue
    32     8    physical_offset            int64   offset of this unit in the commitlog
    40     4    sys_flag                   int32   SYSFLAG_* bits (transaction type, …)
    44     8    born_timestamp_ms          int64
    52     4    born_host_ip               4 B     IPv4; other families are stored as 0.0.0.0
    56     4    born_host_port             int32
    60     8    store_timestamp_ms         int64
    68     4    store_host_ip              4 B
    72     4    store_host_port            int32
    76     4    reconsume_times            int32
    80     8    prepared_transaction_offset int64
    88     8    tags_code                  int64   consume-queue tag hash (0 = no tag)
    96     4    body_length                int32
    100    n    body
    …      1    topic_length               uint8
    …      t    topic                      UTF-8
    …      2    properties_length          uint16
    …      p    properties                 UTF-8, ``name \\x01 value \\x02`` repeated

A blank (end-of-segment) unit is only ``total_size | BLANK_MAGIC`` and fills the rest of
its segment; fewer than 8 trailing bytes are left zero. A zero ``total_size`` means
nothing was written there yet.

Crash contract: the unit CRC covers every header byte after itself, the topic and the
properties; the body is covered by ``body_crc``, which the unit CRC covers in turn. So a
unit decodes only if every byte is as written. The physical offset field must equal the
unit's position, which catches stale units left behind a truncation.
"""

from __future__ import annotations

import mmap
import socket
import struct
import zlib
from dataclasses import dataclass

from broker_core.errors import (
    CorruptionError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from broker_core.message import Message, StoredMessage, tag_hash

Buffer = bytes | bytearray | memoryview | mmap.mmap

MESSAGE_MAGIC = 0x524D5131  # "RMQ1"
BLANK_MAGIC = 0x524D5130  # "RMQ0"
MIN_BLANK_BYTES = 8

HEADER = struct.Struct(
    ">"
    "i"  # 0   total_size
    "I"  # 4   magic
    "I"  # 8   unit_crc
    "I"  # 12  body_crc
    "i"  # 16  queue_id
    "i"  # 20  flag
    "q"  # 24  queue_offset
    "q"  # 32  physical_offset
    "i"  # 40  sys_flag
    "q"  # 44  born_timestamp_ms
    "4s"  # 52  born_host_ip
    "i"  # 56  born_host_port
    "q"  # 60  store_timestamp_ms
    "4s"  # 68  store_host_ip
    "i"  # 72  store_host_port
    "i"  # 76  reconsume_times
    "q"  # 80  prepared_transaction_offset
    "q"  # 88  tags_code
    "i"  # 96  body_length
)
assert HEADER.size == 100
HEADER_SIZE = HEADER.size
SIZE_MAGIC = struct.Struct(">iI")
OFFSETS_AND_TIME = struct.Struct(">qq")  # queue_offset, physical_offset at byte 24
STORE_TIME = struct.Struct(">q")  # store_timestamp_ms at byte 60
CRC = struct.Struct(">I")
QUEUE_OFFSET_POS = 24
STORE_TIME_POS = 60
UNIT_CRC_POS = 8
CRC_START = 12
TOPIC_LEN = struct.Struct(">B")
PROPS_LEN = struct.Struct(">H")

# sys_flag bits
SYSFLAG_TRANSACTION_MASK = 0x0C
SYSFLAG_TRANSACTION_NONE = 0x00
SYSFLAG_TRANSACTION_PREPARED = 0x04
SYSFLAG_TRANSACTION_COMMIT = 0x08
SYSFLAG_TRANSACTION_ROLLBACK = 0x0C

NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
_ZERO_IP = b"\x00\x00\x00\x00"


def encode_properties(props: dict[str, str]) -> bytes:
    """``name \\x01 value \\x02`` pairs; separators inside names or values are refused."""
    parts = []
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidPropertyError(f"property {name!r} must map str to str")
        if NAME_VALUE_SEP in name or PROPERTY_SEP in name or not name:
            raise InvalidPropertyError(f"property name {name!r} is empty or has \\x01/\\x02")
        if NAME_VALUE_SEP in value or PROPERTY_SEP in value:
            raise InvalidPropertyError(f"property {name!r} value contains \\x01 or \\x02")
        parts.append(f"{name}{NAME_VALUE_SEP}{value}{PROPERTY_SEP}")
    return "".join(parts).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    props: dict[str, str] = {}
    if not raw:
        return props
    for pair in raw.decode().split(PROPERTY_SEP):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEP)
            props[name] = value
    return props


def _ip4(host: str) -> bytes:
    try:
        return socket.inet_aton(host)
    except OSError:
        return _ZERO_IP


@dataclass(slots=True)
class EncodedMessage:
    """A unit encoded up to the fields only known at append time.

    ``data`` is the full unit with queue offset, physical offset, store time and unit
    CRC still zero; :func:`seal` fills them in place.
    """

    topic: str
    queue_id: int
    data: bytearray
    tags_code: int
    sys_flag: int

    @property
    def size(self) -> int:
        return len(self.data)


def encode(msg: Message, *, max_body_bytes: int, max_properties_bytes: int) -> EncodedMessage:
    """Validate and encode ``msg``; raises an InvalidArgumentError subclass on bad input."""
    body = bytes(msg.body)
    if len(body) > max_body_bytes:
        raise MessageTooLargeError(
            f"message body is {len(body)} bytes, over the limit of {max_body_bytes}"
        )
    topic = msg.topic.encode()
    if not 0 < len(topic) <= 127:
        raise InvalidTopicError(f"topic {msg.topic!r} must be 1..127 bytes")
    props = encode_properties(msg.properties)
    if len(props) > max_properties_bytes or len(props) > 0xFFFF:
        raise PropertiesTooLargeError(
            f"properties are {len(props)} bytes encoded, over the limit of "
            f"{min(max_properties_bytes, 0xFFFF)}"
        )
    total = HEADER_SIZE + len(body) + 1 + len(topic) + 2 + len(props)
    tags_code = tag_hash(msg.tag)
    header = HEADER.pack(
        total, MESSAGE_MAGIC, 0, zlib.crc32(body), msg.queue_id, msg.flag, 0, 0,
        msg.sys_flag, msg.born_timestamp_ms, _ip4(msg.born_host[0]), msg.born_host[1],
        0, _ZERO_IP, 0, msg.reconsume_times, msg.prepared_transaction_offset, tags_code,
        len(body),
    )  # fmt: skip
    data = bytearray(header)
    data += body
    data += TOPIC_LEN.pack(len(topic))
    data += topic
    data += PROPS_LEN.pack(len(props))
    data += props
    return EncodedMessage(msg.topic, msg.queue_id, data, tags_code, msg.sys_flag)


def seal(
    data: bytearray,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    store_host_ip: bytes,
    store_host_port: int,
) -> None:
    """Fill the append-time fields of an encoded unit and compute its unit CRC."""
    OFFSETS_AND_TIME.pack_into(data, QUEUE_OFFSET_POS, queue_offset, physical_offset)
    STORE_TIME.pack_into(data, STORE_TIME_POS, store_timestamp_ms)
    data[68:72] = store_host_ip
    struct.pack_into(">i", data, 72, store_host_port)
    body_len = struct.unpack_from(">i", data, 96)[0]
    view = memoryview(data)
    crc = zlib.crc32(view[CRC_START:HEADER_SIZE])
    crc = zlib.crc32(view[HEADER_SIZE + body_len :], crc)
    view.release()
    CRC.pack_into(data, UNIT_CRC_POS, crc)


def blank_unit(size: int) -> bytes:
    """An end-of-segment marker covering ``size`` bytes (only its 8-byte head is written)."""
    return SIZE_MAGIC.pack(size, BLANK_MAGIC)


def check_unit(buf: Buffer, pos: int, expected_phys: int, path: str = "") -> int:
    """Verify the unit at ``buf[pos:]`` and return its total size.

    Raises CorruptionError for a unit that does not verify. The caller handles blank
    markers and zero (unwritten) sizes before calling.
    """
    limit = len(buf) - pos
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptionError(f"bad magic {magic:#x}", path=path, position=expected_phys)
    if total < HEADER_SIZE + 3 or total > limit:
        raise CorruptionError(f"bad unit size {total}", path=path, position=expected_phys)
    fields = HEADER.unpack_from(buf, pos)
    unit_crc, body_crc, phys, body_len = fields[2], fields[3], fields[7], fields[18]
    if phys != expected_phys:
        raise CorruptionError(
            f"unit records offset {phys}, expected {expected_phys}", path=path,
            position=expected_phys,
        )  # fmt: skip
    if body_len < 0 or HEADER_SIZE + body_len + 3 > total:
        raise CorruptionError(f"bad body length {body_len}", path=path, position=expected_phys)
    view = memoryview(buf)[pos : pos + total]
    try:
        crc = zlib.crc32(view[CRC_START:HEADER_SIZE])
        crc = zlib.crc32(view[HEADER_SIZE + body_len :], crc)
        if crc != unit_crc:
            raise CorruptionError("unit CRC mismatch", path=path, position=expected_phys)
        if zlib.crc32(view[HEADER_SIZE : HEADER_SIZE + body_len]) != body_crc:
            raise CorruptionError("body CRC mismatch", path=path, position=expected_phys)
    finally:
        view.release()
    return int(total)


def decode(buf: Buffer, pos: int = 0) -> StoredMessage:
    """Decode a unit known to be valid (see :func:`check_unit`)."""
    f = HEADER.unpack_from(buf, pos)
    total, body_len = f[0], f[18]
    body_start = pos + HEADER_SIZE
    body = bytes(buf[body_start : body_start + body_len])
    p = body_start + body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    props_len = PROPS_LEN.unpack_from(buf, p)[0]
    props = decode_properties(bytes(buf[p + 2 : p + 2 + props_len]))
    return StoredMessage(
        topic=topic, queue_id=f[4], queue_offset=f[6], physical_offset=f[7], body=body,
        properties=props, flag=f[5], sys_flag=f[8], born_timestamp_ms=f[9],
        born_host=(socket.inet_ntoa(f[10]), f[11]), store_timestamp_ms=f[12],
        store_host=(socket.inet_ntoa(f[13]), f[14]), reconsume_times=f[15],
        prepared_transaction_offset=f[16], body_crc=f[3], stored_size=total,
    )  # fmt: skip


@dataclass(slots=True)
class DispatchRequest:
    """What dispatch needs from a unit: where it goes and how to index it."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int
    sys_flag: int
    store_timestamp_ms: int
    keys: list[str]


_KEYS_MARK = b"KEYS\x01"
_UNIQ_MARK = b"UNIQ_KEY\x01"


def _prop_value(props: bytes, mark: bytes) -> str | None:
    i = props.find(mark)
    while i > 0 and props[i - 1] != 0x02:
        i = props.find(mark, i + 1)
    if i < 0:
        return None
    start = i + len(mark)
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)].decode()


def dispatch_request(buf: Buffer, pos: int) -> DispatchRequest:
    """Read only what dispatch needs from the (already verified) unit at ``pos``."""
    f = HEADER.unpack_from(buf, pos)
    p = pos + HEADER_SIZE + f[18]
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    props_len = PROPS_LEN.unpack_from(buf, p)[0]
    props = bytes(buf[p + 2 : p + 2 + props_len])
    keys: list[str] = []
    uniq = _prop_value(props, _UNIQ_MARK)
    if uniq:
        keys.append(uniq)
    raw_keys = _prop_value(props, _KEYS_MARK)
    if raw_keys:
        keys.extend(k for k in raw_keys.split(" ") if k)
    return DispatchRequest(topic, f[4], f[6], f[7], f[0], f[17], f[8], f[12], keys)
