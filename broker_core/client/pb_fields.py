"""Protobuf wire primitives for the SendMessage encoder (``wire``).

Varints (one- and two-byte ones from a table), the key bytes of every field ``wire``
writes — each read from the generated descriptors at import and checked for its wire
type, so a changed ``.proto`` fails the import rather than writing wrong bytes —,
length-delimited fields, UTF-8 strings (a non-str raises TypeError), Timestamp and
Duration bodies (a Timestamp outside protobuf's range raises ValueError, as
``FromMilliseconds`` does), and ``%``-template literals. Pure; any thread.
"""

from __future__ import annotations

from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

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


SMALL_LIMIT: Final = 1 << 14  # every varint of one or two bytes
SMALL_VARINTS: Final = tuple(varint(n) for n in range(SMALL_LIMIT))


def vlen(length: int) -> bytes:
    return SMALL_VARINTS[length] if length < SMALL_LIMIT else varint(length)


def _tag(message: type[ProtoMessage], name: str, wire_type: int) -> bytes:
    """The key bytes of field ``name``, checked against the generated descriptor."""
    desc = message.DESCRIPTOR.fields_by_name[name]
    if _WIRE_TYPE.get(desc.type) != wire_type:
        raise ImportError(f"{message.DESCRIPTOR.full_name}.{name} is not wire type {wire_type}")
    return varint(desc.number << 3 | wire_type)


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

# protobuf's Timestamp range (0001-01-01 .. 9999-12-31), checked as FromMilliseconds does.
_TIMESTAMP_SECONDS: Final = (-62135596800, 253402300799)


def len_field(tag: bytes, payload: bytes) -> bytes:
    return tag + vlen(len(payload)) + payload


def utf8(text: Any) -> bytes:
    if type(text) is not str:
        raise TypeError(f"expected a str, got {type(text).__name__}: {text!r:.40}")
    return text.encode("utf-8")


def seconds_nanos(ms: int) -> bytes:
    """A Timestamp/Duration body for ``ms`` (floor seconds, non-negative nanos)."""
    seconds, rest_ms = divmod(ms, 1000)
    nanos = rest_ms * 1_000_000
    return (TIME_SECONDS + varint(seconds) if seconds else b"") + (
        TIME_NANOS + varint(nanos) if nanos else b""
    )


def timestamp(ms: int) -> bytes:
    seconds = ms // 1000
    if not _TIMESTAMP_SECONDS[0] <= seconds <= _TIMESTAMP_SECONDS[1]:
        raise ValueError(
            f"Timestamp is not valid: Seconds {seconds} must be in range "
            f"[{_TIMESTAMP_SECONDS[0]}, {_TIMESTAMP_SECONDS[1]}]."
        )
    return seconds_nanos(ms)


def literal(data: bytes) -> bytes:
    """``data`` as a literal inside a ``%``-template (its 0x25 bytes doubled)."""
    return data.replace(b"%", b"%%")
