"""SendMessage requests written straight to protobuf wire bytes, from columns.

Building one ``apache.rocketmq.v2.Message`` object per message costs ~7.5 µs in Python
(a dozen constructor and field round trips), ~2 ms per 256-message batch. This module
writes the same ``SendMessageRequest`` as bytes instead: the parts every message of a
batch shares (topic, type, born time and host, encoding) are encoded once per batch into
a ``%``-template, and each message costs one template fill (length, id sequence number,
CRC32), its body, and one ``b"".join`` at the end. Lengths below 16 KiB come from a
table of varints.

What it writes parses to exactly what ``tests/client/pb_reference.batch_to_protobuf`` builds (the
tests compare the two field by field): the topic ``Resource``, user properties, and the
system properties below. Each call stamps fresh message ids (same format as
``broker_core.message.new_message_id``) and one born timestamp for the whole batch.

Wire layout (field numbers and wire types are read from the generated descriptors at
import, and checked there; fields appear in field-number order)::

    SendMessageRequest   { 0A len Message }*                    messages = 1
    Message              0A len Resource                        topic = 1
                         { 12 len (0A len key 12 len value) }*  user_properties = 2 (map)
                         1A len SystemProperties                system_properties = 3
                         22 len body                            body = 4
    Resource             [0A len namespace] 12 len name         namespace only if set
    SystemProperties     [0A len tag]                           1  tag, if non-empty
                         { 12 len key }*                        2  keys
                         1A 22 <34 hex chars>                   3  message_id
                         22 0C 08 01 12 08 <8 hex chars>        4  body_digest {CRC32, hex}
                         28 01                                  5  body_encoding IDENTITY
                         30 <type>                              6  NORMAL/FIFO/DELAY/TRANSACTION
                         3A len Timestamp                       7  born_timestamp (per batch)
                         42 len host                            8  born_host (per process)
                         [5A len Timestamp]                     11 delivery_timestamp
                         [8A 01 len group]                      17 message_group, if non-empty
                         [9A 01 len Duration]                   19 orphaned_transaction_
                                                                   recovery_duration
    Timestamp, Duration  [08 seconds] [10 nanos]                zero fields are omitted

``len`` is a varint; strings are UTF-8. Stateless apart from the id counter (which is
per process and thread-safe): any thread may call it.

>>> from rocketmq.grpc_protocol import service_pb2
>>> raw = encode_send_request("orders", [b"hello"], tags=["TagA"])
>>> msg = service_pb2.SendMessageRequest.FromString(raw).messages[0]
>>> (msg.topic.name, msg.body, msg.system_properties.tag)
('orders', b'hello', 'TagA')
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Final, NamedTuple

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client.convert import local_host
from broker_core.client.model import OutgoingMessage
from broker_core.errors import InvalidArgumentError
from broker_core.message import validate_topic_name
from broker_core.pb_enums import DigestType, Encoding, MessageType

# --------------------------------------------------------------------------- varints and tags

_VARINT, _LEN = 0, 2  # protobuf wire types
_WIRE_TYPE: Final = {
    FieldDescriptor.TYPE_STRING: _LEN,
    FieldDescriptor.TYPE_BYTES: _LEN,
    FieldDescriptor.TYPE_MESSAGE: _LEN,
    FieldDescriptor.TYPE_ENUM: _VARINT,
    FieldDescriptor.TYPE_INT32: _VARINT,
    FieldDescriptor.TYPE_INT64: _VARINT,
}


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint; a negative value as its 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_LIMIT: Final = 1 << 14  # every varint of one or two bytes
_SMALL: Final = tuple(varint(n) for n in range(_SMALL_LIMIT))


def _vlen(length: int) -> bytes:
    return _SMALL[length] if length < _SMALL_LIMIT else varint(length)


def _tag(message: type[ProtoMessage], name: str, wire_type: int) -> bytes:
    """The key bytes of field ``name``, checked against the generated descriptor."""
    field = message.DESCRIPTOR.fields_by_name[name]
    if _WIRE_TYPE.get(field.type) != wire_type:
        raise ImportError(f"{message.DESCRIPTOR.full_name}.{name} is not wire type {wire_type}")
    return varint(field.number << 3 | wire_type)


_Sys = pb.SystemProperties
REQUEST_MESSAGE: Final = _tag(service_pb2.SendMessageRequest, "messages", _LEN)
MESSAGE_TOPIC: Final = _tag(pb.Message, "topic", _LEN)
MESSAGE_PROPERTY: Final = _tag(pb.Message, "user_properties", _LEN)
MESSAGE_SYSTEM: Final = _tag(pb.Message, "system_properties", _LEN)
MESSAGE_BODY: Final = _tag(pb.Message, "body", _LEN)
_Entry = pb.Message.UserPropertiesEntry
ENTRY_KEY: Final = _tag(_Entry, "key", _LEN)
ENTRY_VALUE: Final = _tag(_Entry, "value", _LEN)
RESOURCE_NAMESPACE: Final = _tag(pb.Resource, "resource_namespace", _LEN)
RESOURCE_NAME: Final = _tag(pb.Resource, "name", _LEN)
SYS_TAG: Final = _tag(_Sys, "tag", _LEN)
SYS_KEY: Final = _tag(_Sys, "keys", _LEN)
SYS_ID: Final = _tag(_Sys, "message_id", _LEN)
SYS_DIGEST: Final = _tag(_Sys, "body_digest", _LEN)
SYS_ENCODING: Final = _tag(_Sys, "body_encoding", _VARINT)
SYS_TYPE: Final = _tag(_Sys, "message_type", _VARINT)
SYS_BORN_TIME: Final = _tag(_Sys, "born_timestamp", _LEN)
SYS_BORN_HOST: Final = _tag(_Sys, "born_host", _LEN)
SYS_DELIVERY_TIME: Final = _tag(_Sys, "delivery_timestamp", _LEN)
SYS_GROUP: Final = _tag(_Sys, "message_group", _LEN)
SYS_RECOVERY: Final = _tag(_Sys, "orphaned_transaction_recovery_duration", _LEN)
DIGEST_TYPE: Final = _tag(pb.Digest, "type", _VARINT)
DIGEST_CHECKSUM: Final = _tag(pb.Digest, "checksum", _LEN)
TIME_SECONDS: Final = _tag(Timestamp, "seconds", _VARINT)
TIME_NANOS: Final = _tag(Timestamp, "nanos", _VARINT)
if (_tag(Duration, "seconds", _VARINT), _tag(Duration, "nanos", _VARINT)) != (
    TIME_SECONDS,
    TIME_NANOS,
):
    raise ImportError("Duration and Timestamp no longer share their field numbers")

MESSAGE_ID_CHARS: Final = 34
# protobuf's Timestamp range (0001-01-01 .. 9999-12-31), checked as FromMilliseconds does.
_TIMESTAMP_SECONDS: Final = (-62135596800, 253402300799)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _vlen(len(payload)) + payload


def _utf8(text: Any) -> bytes:
    if type(text) is not str:
        raise TypeError(f"expected a str, got {type(text).__name__}: {text!r:.40}")
    return text.encode("utf-8")


def _seconds_nanos(ms: int) -> bytes:
    """A Timestamp/Duration body for ``ms`` (floor seconds, non-negative nanos)."""
    seconds, rest_ms = divmod(ms, 1000)
    nanos = rest_ms * 1_000_000
    return (TIME_SECONDS + varint(seconds) if seconds else b"") + (
        TIME_NANOS + varint(nanos) if nanos else b""
    )


def _timestamp(ms: int) -> bytes:
    seconds = ms // 1000
    if not _TIMESTAMP_SECONDS[0] <= seconds <= _TIMESTAMP_SECONDS[1]:
        raise ValueError(
            f"Timestamp is not valid: Seconds {seconds} must be in range "
            f"[{_TIMESTAMP_SECONDS[0]}, {_TIMESTAMP_SECONDS[1]}]."
        )
    return _seconds_nanos(ms)


def _lit(data: bytes) -> bytes:
    """``data`` as a literal inside a ``%``-template (its 0x25 bytes doubled)."""
    return data.replace(b"%", b"%%")


# --------------------------------------------------------------------------- message ids


class _IdBlocks:
    """Message ids as ``new_message_id`` shapes them, handed out a batch at a time.

    ``"01"`` + 12 random hex + 4 hex pid + 8 hex epoch ms + 8 hex sequence (34 chars).
    The random part is drawn per process (again after a fork, so a forked worker
    never repeats its parent's ids); within a process the sequence makes ids unique.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._prefix = b""
        self._next_seq = 0

    def reserve(self, count: int) -> tuple[bytes, int]:
        """(the ids' first 26 chars, first sequence number) for ``count`` ids."""
        pid = os.getpid()
        with self._lock:
            if pid != self._pid:
                self._pid = pid
                self._prefix = b"01%s%04X" % (os.urandom(6).hex().upper().encode(), pid & 0xFFFF)
            first = self._next_seq
            self._next_seq = (first + count) & 0xFFFFFFFF
        millis = time.time_ns() // 1_000_000 & 0xFFFFFFFF
        return b"%s%08X" % (self._prefix, millis), first


_ids = _IdBlocks()


def _sequence(first: int, count: int) -> Iterable[int]:
    if first + count <= 0x1_0000_0000:
        return range(first, first + count)
    return [(first + i) & 0xFFFFFFFF for i in range(count)]  # the 32-bit counter wraps


# --------------------------------------------------------------------------- the batch


def _type_tail(message_type: int, born: bytes, host: bytes) -> bytes:
    """System-property fields 5..8: encoding, type, born time, born host."""
    tail = SYS_ENCODING + varint(Encoding.IDENTITY) if Encoding.IDENTITY else b""
    tail += SYS_TYPE + varint(message_type) if message_type else b""
    return tail + _field(SYS_BORN_TIME, born) + (_field(SYS_BORN_HOST, host) if host else b"")


class _Batch:
    """What every message of one request shares, encoded once."""

    def __init__(self, topic: str, namespace: str, count: int) -> None:
        resource = (_field(RESOURCE_NAMESPACE, _utf8(namespace)) if namespace else b"") + _field(
            RESOURCE_NAME, _utf8(topic)
        )
        self.topic_field = _field(MESSAGE_TOPIC, resource)
        id_prefix, first = _ids.reserve(count)
        self.seqs = _sequence(first, count)
        # message_id (3) up to its sequence number, then body_digest (4) up to the CRC
        self.id_head = _lit(SYS_ID + varint(MESSAGE_ID_CHARS) + id_prefix)
        digest = DIGEST_TYPE + varint(DigestType.CRC32) + DIGEST_CHECKSUM + varint(8)
        self.digest_head = _lit(SYS_DIGEST + varint(len(digest) + 8) + digest)  # + 8 hex
        self._born = _seconds_nanos(time.time_ns() // 1_000_000)
        self._host = _utf8(local_host())

    def middle(self, message_type: int, suffix: bytes = b"") -> bytes:
        """Template of system-property fields 3..8 (+ ``suffix``): fill (seq, crc32)."""
        tail = _type_tail(message_type, self._born, self._host) + suffix
        return self.id_head + b"%08X" + self.digest_head + b"%08X" + _lit(tail)


def _plain(batch: _Batch, bodies: Sequence[Any], message_type: int, suffix: bytes) -> bytes | None:
    """Messages with nothing but a body: one template fill each (None: a body too large)."""
    middle = batch.middle(message_type, suffix)
    system_len = len(middle % (0, 0))
    fixed = (
        len(batch.topic_field)
        + len(MESSAGE_SYSTEM)
        + len(_vlen(system_len))
        + system_len
        + len(MESSAGE_BODY)
    )
    if fixed + max(map(len, bodies)) + 2 >= _SMALL_LIMIT:
        return None  # a length needs a varint longer than the table's
    template = (
        _lit(REQUEST_MESSAGE)
        + b"%s"
        + _lit(batch.topic_field + MESSAGE_SYSTEM + _vlen(system_len))
        + middle
        + _lit(MESSAGE_BODY)
        + b"%s"
    )
    small = _SMALL
    heads = [  # message length, sequence, CRC32, body length
        template % (small[fixed + size + (1 if size < 0x80 else 2)], seq, crc, small[size])
        for seq, size, crc in zip(
            batch.seqs, map(len, bodies), map(zlib.crc32, bodies), strict=False
        )
    ]
    out: list[Any] = [b""] * (2 * len(heads))
    out[0::2] = heads
    out[1::2] = bodies
    return b"".join(out)


def _general(batch: _Batch, bodies: Sequence[Any], columns: _Columns, suffix: bytes) -> bytes:
    """Messages with optional fields, encoded column by column first (see _Columns)."""
    types = columns.types()
    middles = {kind: batch.middle(kind) for kind in set(types)}
    kinds = repeat(types[0]) if len(middles) == 1 else types
    topic = batch.topic_field
    out: list[Any] = []
    append = out.append
    rows = zip(batch.seqs, bodies, kinds, *columns.encoded(), strict=False)
    for seq, body, kind, before, after, props in rows:
        system = before + middles[kind] % (seq, zlib.crc32(body)) + after + suffix
        inner = props + MESSAGE_SYSTEM + _vlen(len(system)) + system + MESSAGE_BODY
        inner += _vlen(len(body))
        append(REQUEST_MESSAGE + _vlen(len(topic) + len(inner) + len(body)) + topic + inner)
        append(body)
    return b"".join(out)


# --------------------------------------------------------------------------- columns


class _Columns(NamedTuple):
    """The optional columns of one request (None: absent)."""

    tags: Sequence[str | None] | None
    keys: Sequence[Sequence[str] | None] | None
    properties: Sequence[Mapping[str, str] | None] | None
    groups: Sequence[str | None] | None
    delivery_ms: Sequence[int | None] | None
    transactional: bool

    def check(self, bodies: Sequence[Any]) -> None:
        """The errors ``batch_to_protobuf`` raises, for the first message with one."""
        for name, column in zip(_COLUMN_NAMES, self[:5], strict=True):
            if column is not None and len(column) != len(bodies):
                raise InvalidArgumentError(
                    f"column {name!r} has {len(column)} entries for {len(bodies)} bodies"
                )
        times = self.delivery_ms
        if self.transactional and times is not None and any(d is not None for d in times):
            raise InvalidArgumentError("a transactional message cannot have a delivery time")
        empty = clash = len(bodies)
        if not all(bodies):
            empty = next(i for i, body in enumerate(bodies) if not body)
        if self.groups is not None and times is not None and not self.transactional:
            both = (
                i
                for i, (g, d) in enumerate(zip(self.groups, times, strict=True))
                if g and d is not None
            )
            clash = next(both, clash)
        if empty < len(bodies) and empty <= clash:
            raise InvalidArgumentError("message body is empty")
        if clash < len(bodies):
            raise InvalidArgumentError(
                "a message cannot have both a message group and a delivery time"
            )

    def types(self) -> Sequence[int]:
        """Each message's type (FIFO with a group, DELAY with a delivery time), or the
        one type of them all."""
        if self.transactional:
            return (MessageType.TRANSACTION,)
        if self.groups is None and self.delivery_ms is None:
            return (MessageType.NORMAL,)
        fifo, delay, normal = MessageType.FIFO, MessageType.DELAY, MessageType.NORMAL
        groups, times = _or_none(self.groups), _or_none(self.delivery_ms)
        return [
            fifo if g else delay if d is not None else normal
            for g, d in zip(groups, times, strict=False)
        ]

    def encoded(self) -> tuple[Iterable[bytes], Iterable[bytes], Iterable[bytes]]:
        """Per message: system fields 1-2 (tag, keys), 11-17 (delivery, group), props."""
        try:
            tags = _strings(SYS_TAG, self.tags)
            keys = None if self.keys is None else [_keys(ks) if ks else b"" for ks in self.keys]
            times = (
                None
                if self.delivery_ms is None
                else [
                    b"" if d is None else _field(SYS_DELIVERY_TIME, _timestamp(d))
                    for d in self.delivery_ms
                ]
            )
            props = (
                None
                if self.properties is None
                else [_properties(p) if p else b"" for p in self.properties]
            )
            return (
                _joined(tags, keys),
                _joined(times, _strings(SYS_GROUP, self.groups)),
                repeat(b"") if props is None else props,
            )
        except AttributeError as exc:  # no .encode(): not a str
            raise TypeError(f"tags, keys, groups and properties must be str ({exc})") from None


_COLUMN_NAMES: Final = ("tags", "keys", "properties", "message_groups", "delivery_ms")


def _strings(tag: bytes, column: Sequence[str | None] | None) -> list[bytes] | None:
    """An optional string field per row, absent where falsy; each distinct value once."""
    if column is None:
        return None
    encoded = {v: _field(tag, v.encode()) for v in set(column) if v}
    return [encoded[v] if v else b"" for v in column]


def _keys(keys: Iterable[str]) -> bytes:
    return b"".join([SYS_KEY + _vlen(len(k)) + k for k in [k.encode() for k in keys]])


def _properties(props: Mapping[str, str]) -> bytes:
    """Message field 2 once per entry: a map entry is a message {1: key, 2: value}."""
    out = []
    for key, value in props.items():
        k, v = key.encode(), value.encode()
        entry = ENTRY_KEY + _vlen(len(k)) + k + ENTRY_VALUE + _vlen(len(v)) + v
        out.append(MESSAGE_PROPERTY + _vlen(len(entry)) + entry)
    return b"".join(out)


def _or_none(column: Sequence[Any] | None) -> Iterable[Any]:
    return repeat(None) if column is None else column


def _joined(first: list[bytes] | None, second: list[bytes] | None) -> Iterable[bytes]:
    if first is None or second is None:
        other = first if second is None else second
        return repeat(b"") if other is None else other
    return list(map(bytes.__add__, first, second))


# --------------------------------------------------------------------------- entry points


def encode_send_request(
    topic: str,
    bodies: Sequence[bytes],
    *,
    namespace: str = "",
    tags: Sequence[str | None] | None = None,
    keys: Sequence[Sequence[str] | None] | None = None,
    properties: Sequence[Mapping[str, str] | None] | None = None,
    message_groups: Sequence[str | None] | None = None,
    delivery_ms: Sequence[int | None] | None = None,
    transaction_recovery_ms: int | None = None,
) -> bytes:
    """A serialized ``SendMessageRequest`` with one message per body, to ``topic``.

    The optional columns line up with ``bodies`` (None: the column is absent; a falsy
    tag/group, falsy keys/properties or a None delivery time: absent in that row). A
    message with a group is FIFO, one with a delivery time (epoch ms) DELAY, else NORMAL;
    with ``transaction_recovery_ms`` every message is a TRANSACTION half carrying that
    recovery duration. Raises, before encoding anything, what ``batch_to_protobuf`` and
    ``transactions.prepare`` raise: InvalidTopicError for an illegal topic,
    InvalidArgumentError for an empty body, a group together with a delivery time, or a
    transactional message with a delivery time; TypeError for a non-str tag, key, group
    or property; ValueError for a delivery time outside protobuf's Timestamp range.
    An empty ``bodies`` gives an empty request (b"").
    """
    if transaction_recovery_ms is not None and transaction_recovery_ms < 0:
        raise InvalidArgumentError(
            f"transaction_recovery_ms must be >= 0, got {transaction_recovery_ms}"
        )
    columns = _Columns(
        tags, keys, properties, message_groups, delivery_ms, transaction_recovery_ms is not None
    )
    validate_topic_name(topic)
    columns.check(bodies)
    if not bodies:
        return b""
    batch = _Batch(topic, namespace, len(bodies))
    suffix = (
        b""
        if transaction_recovery_ms is None
        else _field(SYS_RECOVERY, _seconds_nanos(transaction_recovery_ms))
    )
    if all(column is None for column in columns[:5]):
        kind = MessageType.TRANSACTION if columns.transactional else MessageType.NORMAL
        plain = _plain(batch, bodies, kind, suffix)
        if plain is not None:
            return plain
    return _general(batch, bodies, columns, suffix)


def encode_messages(
    topic: str,
    messages: Iterable[Any],
    *,
    namespace: str = "",
    transaction_recovery_ms: int | None = None,
) -> tuple[bytes, int]:
    """:func:`encode_send_request` for messages as ``send_batch`` takes them.

    Each item is an OutgoingMessage, a tuple in its field order, or a bare body (bytes
    or str). Returns (request bytes, number of messages).
    """
    items = messages if isinstance(messages, list) else list(messages)
    columns: list[Sequence[Any] | None] = [None] * 5
    if all(type(item) is bytes for item in items):  # bare bodies: the fast path
        bodies: Sequence[Any] = items
    else:
        fields = list(zip(*map(OutgoingMessage.of, items), strict=True))
        bodies = [b if type(b) is bytes else bytes(b) for b in fields[0]]
        columns = [column if any(column) else None for column in fields[1:5]]
        columns.append(fields[5] if any(d is not None for d in fields[5]) else None)
    tags, keys, properties, groups, delivery = columns
    raw = encode_send_request(
        topic,
        bodies,
        namespace=namespace,
        tags=tags,
        keys=keys,
        properties=properties,
        message_groups=groups,
        delivery_ms=delivery,
        transaction_recovery_ms=transaction_recovery_ms,
    )
    return raw, len(bodies)
