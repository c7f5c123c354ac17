"""protobuf ``apache.rocketmq.v2.Message`` → our :class:`~broker_core.message.Message`.

:func:`to_messages` validates everything a producer controls before the broker sees it, so
a bad message fails the whole ``SendMessage`` request before any message of it is stored
(the broker stores held messages — delayed, transactional — one by one, so a late failure
would leave the earlier ones behind).

What goes where (RocketMQ's property names, see ``broker_core.message``)::

    topic.name                              Message.topic (resource_namespace is ignored)
    body (+ body_encoding GZIP: inflated)   Message.body, at most ``max_body_bytes``
    system_properties.body_digest           checked against the body as sent; not stored
    system_properties.message_id            UNIQ_KEY (required: the id the client knows)
    system_properties.tag                   TAGS
    system_properties.keys                  KEYS (joined with a space)
    system_properties.message_group         __SHARDINGKEY (FIFO: the broker picks the queue)
    system_properties.priority              _SYS_MSG_PRIORITY_ (PRIORITY: queue = priority)
    system_properties.lite_topic            __LITE_TOPIC (LITE: the lite topic's own queue)
    system_properties.delivery_timestamp    __STARTDELIVERTIME (ms; the broker's timer)
    system_properties.message_type          TRANSACTION → TRAN_MSG=true (a half message)
    …orphaned_transaction_recovery_duration CHECK_IMMUNITY_TIME_IN_SECONDS
    system_properties.born_timestamp/host   Message.born_timestamp_ms / born_host
    user_properties                         properties, unless a key is a system key

The queue id is always left to the broker (-1): RocketMQ 5 clients choose a queue only to
pick an endpoint and do not send it.

Compatibility: the official Python client 5.1 writes a delivery time in *milliseconds*
into ``Timestamp.seconds``. Such a value lies beyond the largest valid protobuf Timestamp
(year 9999), so :func:`timestamp_ms` reads any ``seconds`` past that limit as ms.

Everything here is pure (no I/O, no broker); errors are ``broker_core.errors`` classes
that ``server/status.py`` maps to codes.

>>> from rocketmq.grpc_protocol import definition_pb2 as pb
>>> proto = pb.Message(topic=pb.Resource(name="orders"), body=b"paid",
...                    user_properties={"region": "eu"},
...                    system_properties=pb.SystemProperties(
...                        message_id="01AB", tag="paid", keys=["o-1"],
...                        message_type=pb.MessageType.NORMAL))
>>> [m] = to_messages([proto], limits=Limits(4 << 20, 32 << 10), peer=("10.0.0.9", 5555),
...                    now_ms=1_000)
>>> m.topic, m.tag, m.keys, m.properties["UNIQ_KEY"], m.properties["region"], m.queue_id
('orders', 'paid', ['o-1'], '01AB', 'eu', -1)
>>> m.born_host, m.born_timestamp_ms
(('10.0.0.9', 5555), 1000)
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from broker_core.broker.lite import validate_lite_topic
from broker_core.errors import (
    EmptyBodyError,
    InvalidArgumentError,
    InvalidMessageGroupError,
    MessageCorruptedError,
    MessageTooLargeError,
    MessageTypeConflictError,
    UnsupportedError,
)
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_KEYS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    validate_topic_name,
)
from broker_core.pb_enums import (
    DIGEST_TYPE_NAMES,
    MESSAGE_TYPE_NAMES,
    DigestType,
    Encoding,
    MessageType,
)
from broker_core.protocol.message_rules import (
    MAX_MESSAGE_GROUP_CHARS,
    Limits,
    born_host,
    check_keys,
    check_message_id,
    check_properties_size,
    check_tag,
    check_text,
    check_user_properties,
)
from broker_core.protocol.properties import (
    PROPERTY_CHECK_IMMUNITY_S,
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
)

if TYPE_CHECKING:  # annotations only (the generated classes carry no types)
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.timestamp_pb2 import Timestamp
    from rocketmq.grpc_protocol import definition_pb2 as pb

__all__ = ["Limits", "peer_address", "timestamp_ms", "to_messages"]

MAX_TIMESTAMP_SECONDS: Final = 253_402_300_799  # 9999-12-31T23:59:59Z, the protobuf maximum

Type = MessageType
# the fields each type needs: (message group, delivery timestamp, priority, lite topic)
_WANTS: Final = {
    Type.NORMAL: (False, False, False, False),
    Type.FIFO: (True, False, False, False),
    Type.DELAY: (False, True, False, False),
    Type.PRIORITY: (False, False, True, False),
    Type.LITE: (False, False, False, True),
}
_FIELD_NAMES: Final = ("message group", "delivery timestamp", "priority", "lite topic")


# ---- small conversions -------------------------------------------------------------------


def timestamp_ms(ts: Timestamp) -> int:
    """A protobuf Timestamp in ms since the epoch (see the module note on the Python client).

    Raises InvalidArgumentError for a time before the epoch.
    """
    seconds, nanos = int(ts.seconds), int(ts.nanos)
    if seconds < 0 or nanos < 0:
        raise InvalidArgumentError(f"timestamp before 1970: {seconds}s {nanos}ns")
    if seconds > MAX_TIMESTAMP_SECONDS:  # milliseconds written into the seconds field
        return seconds
    return seconds * 1000 + nanos // 1_000_000


def duration_ms(d: Duration) -> int:
    """A protobuf Duration in ms; InvalidArgumentError when it is negative."""
    ms = int(d.seconds) * 1000 + int(d.nanos) // 1_000_000
    if ms < 0:
        raise InvalidArgumentError(f"duration must not be negative, got {ms} ms")
    return ms


def peer_address(peer: str) -> tuple[str, int]:
    """``grpc.ServicerContext.peer()`` (``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678``) → (host, port).

    Anything else (a unix socket, an unknown form) gives ``("127.0.0.1", 0)``.
    """
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return ("127.0.0.1", 0)
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    return (host, int(port)) if host and port.isdigit() else ("127.0.0.1", 0)


# ---- body --------------------------------------------------------------------------------


def body_digest(body: bytes, digest_type: int) -> str:
    """The digest the RocketMQ clients compute: CRC32 as 8 hex digits, or MD5/SHA1 hex.

    Upper case, as the clients send it. InvalidArgumentError for an unknown type.
    """
    if digest_type == DigestType.CRC32:
        return f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"
    if digest_type == DigestType.MD5:
        return hashlib.md5(body).hexdigest().upper()
    if digest_type == DigestType.SHA1:
        return hashlib.sha1(body).hexdigest().upper()
    raise InvalidArgumentError(f"unknown body digest type {digest_type}")


def verify_digest(body: bytes, digest: pb.Digest, message_id: str) -> None:
    """Raise MessageCorruptedError (MESSAGE_CORRUPTED) when the body fails its digest."""
    if digest.type == DigestType.DIGEST_TYPE_UNSPECIFIED:
        return
    expected = digest.checksum.strip().upper()
    actual = body_digest(body, digest.type)
    if expected != actual:
        kind = DIGEST_TYPE_NAMES.get(digest.type, str(digest.type))
        raise MessageCorruptedError(
            f"message {message_id}: body {kind} digest is {actual}, the client sent "
            f"{expected or 'an empty one'}; the body was damaged on its way"
        )


def decode_body(body: bytes, encoding: int, max_body_bytes: int) -> bytes:
    """The stored body: IDENTITY as sent, GZIP (or zlib) inflated to at most the limit.

    Raises MessageTooLargeError past ``max_body_bytes`` (without inflating further),
    MessageCorruptedError when a compressed body does not inflate, InvalidArgumentError for an
    unknown encoding.
    """
    if encoding in (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED):
        plain, inflated = body, False
    elif encoding == Encoding.GZIP:
        wbits = 31 if body[:2] == b"\x1f\x8b" else 15  # gzip header, else zlib (as clients do)
        inflater = zlib.decompressobj(wbits)
        try:
            plain = inflater.decompress(body, max_body_bytes + 1)
        except zlib.error as exc:
            raise MessageCorruptedError(f"GZIP message body does not inflate: {exc}") from None
        if len(plain) <= max_body_bytes and not inflater.eof:
            raise MessageCorruptedError("GZIP message body is truncated")
        inflated = True
    else:
        raise InvalidArgumentError(f"unknown body encoding {encoding}")
    if len(plain) > max_body_bytes:
        size = f"more than {max_body_bytes} bytes inflated" if inflated else f"{len(plain)} bytes"
        raise MessageTooLargeError(
            f"message body is {size}, over the limit of {max_body_bytes} bytes"
        )
    return plain


# ---- properties --------------------------------------------------------------------------


def _system_properties(sp: pb.SystemProperties) -> dict[str, str]:
    """Tag, keys, message id and message group as broker properties (validated)."""
    props: dict[str, str] = {PROPERTY_UNIQ_KEY: check_message_id(sp.message_id)}
    if sp.HasField("tag"):
        props[PROPERTY_TAGS] = check_tag(sp.tag)
    if sp.keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(check_keys(sp.keys))
    if sp.HasField("message_group"):
        props[PROPERTY_MESSAGE_GROUP] = check_text(
            "message group", sp.message_group, MAX_MESSAGE_GROUP_CHARS, InvalidMessageGroupError
        )
    if sp.HasField("priority"):
        if sp.priority < 0:
            raise InvalidArgumentError(f"priority must be ≥ 0, got {sp.priority}")
        props[PROPERTY_PRIORITY] = str(sp.priority)
    if sp.HasField("lite_topic"):
        props[PROPERTY_LITE_TOPIC] = validate_lite_topic(sp.lite_topic)
    return props


def _check_type(declared: int, fields: tuple[bool, bool, bool, bool]) -> bool:
    """Check the declared message type against the fields; True for a transactional one.

    ``fields`` says which of (message group, delivery timestamp, priority, lite topic) the
    message has; at most one may be set. ``MESSAGE_TYPE_UNSPECIFIED`` is taken from the
    fields. A conflict is MessageTypeConflictError (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).
    """
    name = MESSAGE_TYPE_NAMES.get(declared, str(declared))
    if declared not in MESSAGE_TYPE_NAMES:
        raise UnsupportedError(f"message type {name} is not supported by this broker")
    present = [n for n, has in zip(_FIELD_NAMES, fields, strict=True) if has]
    if len(present) > 1:
        raise MessageTypeConflictError(
            f"a message cannot have both a {present[0]} and a {present[1]}"
        )
    if declared == Type.NORMAL and fields == _WANTS[Type.PRIORITY]:
        # the official Node.js client 1.0.8 declares priority 0 as NORMAL (``!priority``);
        # RocketMQ takes the type from the properties, and so do we: a PRIORITY message
        return False
    if declared in _WANTS and _WANTS[declared] != fields:
        raise MessageTypeConflictError(
            f"message type {name} conflicts with the message: it has "
            f"{present[0] if present else 'none of ' + ', '.join(_FIELD_NAMES)}"
        )
    if declared == Type.TRANSACTION and any(fields[1:]):
        raise MessageTypeConflictError(f"a transactional message cannot have a {present[-1]}")
    return bool(declared == Type.TRANSACTION)


# ---- the message -------------------------------------------------------------------------


# System properties a message always has (id, tag, group, the broker's own flags) encode
# to less than this; only keys and user properties can make the encoding longer.
_FIXED_PROPERTIES_BYTES: Final = 2048
_PLAIN_BODY: Final = (Encoding.IDENTITY, Encoding.ENCODING_UNSPECIFIED)


def to_messages(
    protos: Iterable[pb.Message], *, limits: Limits, peer: tuple[str, int], now_ms: int
) -> list[Message]:
    """Convert and validate every protobuf message of a request, in order.

    See the module docstring for the mapping. ``peer`` is the client's address (born host
    when a message names none, and the born port); ``now_ms`` is the born time when a
    message carries none. The checks are the same for each message; what a batch repeats
    (its topic, message type and born time) is checked or converted once.
    """
    topics: dict[str, str] = {}
    kinds: dict[tuple[int, tuple[bool, bool, bool, bool]], bool] = {}
    borns: dict[tuple[int, int], int] = {}
    check_size_always = limits.max_properties_bytes < _FIXED_PROPERTIES_BYTES
    out = []
    for proto in protos:
        name = proto.topic.name
        topic = topics.get(name)
        if topic is None:
            topic = topics[name] = validate_topic_name(name)
        sp = proto.system_properties
        props = _system_properties(sp)
        body = proto.body
        if sp.HasField("body_digest"):
            digest = sp.body_digest
            if digest.type != DigestType.CRC32 or digest.checksum != f"{zlib.crc32(body):08X}":
                verify_digest(body, digest, props[PROPERTY_UNIQ_KEY])  # the general check
        if sp.body_encoding not in _PLAIN_BODY or len(body) > limits.max_body_bytes:
            body = decode_body(body, sp.body_encoding, limits.max_body_bytes)
        if not body:
            raise EmptyBodyError(f"message {props[PROPERTY_UNIQ_KEY]} has an empty body")
        has_delivery = sp.HasField("delivery_timestamp")
        kind = (
            sp.message_type,
            (
                PROPERTY_MESSAGE_GROUP in props,
                has_delivery,
                PROPERTY_PRIORITY in props,
                PROPERTY_LITE_TOPIC in props,
            ),
        )
        transactional = kinds.get(kind)
        if transactional is None:
            transactional = kinds[kind] = _check_type(*kind)
        if has_delivery:
            props[PROPERTY_DELIVER_TIME_MS] = str(timestamp_ms(sp.delivery_timestamp))
        if transactional:
            props[PROPERTY_TRANSACTION_PREPARED] = "true"
            if sp.HasField("orphaned_transaction_recovery_duration"):
                immunity_s = duration_ms(sp.orphaned_transaction_recovery_duration) // 1000
                props[PROPERTY_CHECK_IMMUNITY_S] = str(immunity_s)
        extra = proto.user_properties
        if extra:
            props.update(check_user_properties(extra))
        if extra or check_size_always or PROPERTY_KEYS in props:
            check_properties_size(props, limits.max_properties_bytes)
        born_ms = now_ms
        if sp.HasField("born_timestamp"):
            ts = sp.born_timestamp
            at = (ts.seconds, ts.nanos)
            born_ms = borns.get(at) or borns.setdefault(at, timestamp_ms(ts)) or now_ms
        out.append(
            Message(
                topic,
                body,
                queue_id=-1,
                properties=props,
                born_timestamp_ms=born_ms,
                born_host=(born_host(sp.born_host, peer[0]), peer[1]),
            )
        )
    return out
