"""Messages as the broker sees them, property keys, names, hashes and ids.

A :class:`Message` is what a producer hands in; a :class:`StoredMessage` is what the
store hands back (the same fields plus where and when it was stored). Properties are
``str -> str``; system properties use the RocketMQ key names below so tools that know
RocketMQ read them the same way.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field

from broker_core.errors import InvalidGroupError, InvalidTopicError

# System property keys (RocketMQ's names).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # the client-visible message id
PROPERTY_DELAY_LEVEL = "DELAY"
PROPERTY_DELIVER_TIME_MS = "__STARTDELIVERTIME"
PROPERTY_TIMER_ID = "TIMER_ID"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_CONSUME_START_TIME = "CONSUME_START_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"

KEY_SEPARATOR = " "  # RocketMQ joins several keys with a space

TOPIC_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_NAME_CHARS = 127
MAX_GROUP_NAME_CHARS = 255


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a legal topic name, else raise InvalidTopicError."""
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if len(topic) > MAX_TOPIC_NAME_CHARS:
        raise InvalidTopicError(
            f"topic name is {len(topic)} chars, longer than {MAX_TOPIC_NAME_CHARS}: {topic[:40]!r}…"
        )
    if not TOPIC_NAME_RE.match(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    return topic


def validate_group_name(group: str) -> str:
    """Return ``group`` if it is a legal group name, else raise InvalidGroupError."""
    if not group:
        raise InvalidGroupError("group name is empty")
    if len(group) > MAX_GROUP_NAME_CHARS:
        raise InvalidGroupError(f"group name longer than {MAX_GROUP_NAME_CHARS} chars")
    if not TOPIC_NAME_RE.match(group):
        raise InvalidGroupError(f"group name {group!r} has characters outside [%|a-zA-Z0-9_-]")
    return group


def tag_hash(tag: str | None) -> int:
    """The 8-byte tag code stored in consume-queue units.

    0 means "no tag". Any tag hashes to a non-zero value (CRC32 with bit 32 set), so a
    filter can skip units by code and then confirm the real tag from the commitlog.
    """
    if not tag:
        return 0
    return zlib.crc32(tag.encode()) | (1 << 32)


def key_hash(key: str) -> int:
    """The 4-byte hash an index file files a key under (unsigned CRC32)."""
    return zlib.crc32(key.encode())


class _TagAndKeys:
    """``tag`` and ``keys`` read from the properties (shared by both message classes)."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tag(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS) or None

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS, "")
        return [k for k in raw.split(KEY_SEPARATOR) if k]


@dataclass(slots=True)
class Message(_TagAndKeys):
    """A message as produced: what the store is asked to append."""

    topic: str
    body: bytes
    queue_id: int = 0  # the broker's send chooses one when this is negative
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass(slots=True)
class StoredMessage(_TagAndKeys):
    """A message read back from the commitlog, with where and when it was stored."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: tuple[str, int]
    store_timestamp_ms: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    stored_size: int

    @property
    def message_id(self) -> str:
        """The client-visible id: the producer's UNIQ_KEY, else the offset id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or offset_message_id(
            self.store_host, self.physical_offset
        )


def offset_message_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """RocketMQ's offset message id: store host (4 B IPv4 + 4 B port) and offset, in hex."""
    packed = socket.inet_aton(store_host[0]) + struct.pack(">iq", store_host[1], physical_offset)
    return packed.hex().upper()


def decode_offset_message_id(message_id: str) -> tuple[tuple[str, int], int]:
    """Inverse of :func:`offset_message_id`; raises ValueError when it is not one."""
    raw = bytes.fromhex(message_id)
    if len(raw) != 16:
        raise ValueError(f"not an offset message id: {message_id!r}")
    port, offset = struct.unpack(">iq", raw[4:])
    return (socket.inet_ntoa(raw[:4]), port), offset


class _UniqIdGenerator:
    """Ids shaped like RocketMQ 5's: version, host, pid, time and a sequence, 34 hex chars."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._prefix = ""
        self.reseed()

    def reseed(self) -> None:
        """A new random prefix and this process's pid: a forked child must not repeat its
        parent's ids (the sequence alone would collide within the same millisecond)."""
        self._prefix = "01" + os.urandom(6).hex().upper() + f"{os.getpid() & 0xFFFF:04X}"

    def next_id(self) -> str:
        with self._lock:
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            seq = self._seq
        millis = int(time.time() * 1000) & 0xFFFFFFFF
        return f"{self._prefix}{millis:08X}{seq:08X}"


_ids = _UniqIdGenerator()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ids.reseed)


def new_message_id() -> str:
    """A fresh unique message id (for messages whose producer sent none)."""
    return _ids.next_id()
