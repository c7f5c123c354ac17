"""The revive log: POP state changes as records in the store's ``REVIVE_TOPIC``.

Every POP state change is appended as one record, the body of a message in
``REVIVE_TOPIC`` queue 0 of the store itself, so the commitlog stays the only truth (its
unit CRC covers these bytes; no second checksum). Only :class:`ReviveLog` writes that
queue. A record's queue offset there is its *revive offset*; the revive offset of a
CHECKPOINT is the *version* of the delivery it starts and goes into the receipt handle.
Records, big-endian::

    offset size field
    0      1    format         uint8   RECORD_FORMAT (1)
    1      1    kind           uint8   RecordKind: CHECKPOINT, a resolution (ACK, ...) or
                                       RESET (queue_offset: where the group now starts)
    2      4    queue_id       int32
    6      8    queue_offset   int64   the message's offset in (topic, queue_id)
    14     8    anchor         int64   CHECKPOINT: a replay must start at or before this
                                       revive offset to know the fate of every offset
                                       above the message (see ``state``); else -1
    22     8    resolves       int64   resolutions: version (checkpoint) they end; else -1
    30     8    time_ms        int64   CHECKPOINT: pop time; resolutions: when resolved
    38     8    invisible_ms   int64   CHECKPOINT: invisible duration from time_ms; else 0
    46     4    attempt        int32   CHECKPOINT: delivery attempt it starts (1 = first)
    50     1    group_length   uint8
    51     g    group          UTF-8   consumer group
    …      1    topic_length   uint8
    …      t    topic          UTF-8   queue topic (an original topic or ``%RETRY%{group}``)
    …      2    mgroup_length  uint16
    …      m    message_group  UTF-8   FIFO message group ("" when none)

Durability: records are as durable as the store's flush mode. A resolution written in
the same ``put_messages`` call as the retry/DLQ copy it accompanies comes after the
copy, so a torn tail can only cause a duplicate delivery, never a loss. A record that
verifies in the commitlog but does not decode raises CorruptionError.

Threads: no locking here; the POP service calls it under its own lock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from broker_core.broker.system_topics import REVIVE_TOPIC
from broker_core.errors import CorruptionError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead

QueueKey = tuple[str, str, int]  # (group, queue topic, queue id)

RECORD_FORMAT = 1
REVIVE_QUEUE_ID = 0
RECORD = struct.Struct(
    ">"
    "B"  # 0   format
    "B"  # 1   kind
    "i"  # 2   queue_id
    "q"  # 6   queue_offset
    "q"  # 14  anchor
    "q"  # 22  resolves
    "q"  # 30  time_ms
    "q"  # 38  invisible_ms
    "i"  # 46  attempt
)
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_REPLAY_BATCH = 256


class RecordKind(IntEnum):
    CHECKPOINT = 1  # a delivery starts (first pop, FIFO redelivery or invisible change)
    ACK = 2  # the consumer acked the delivery
    REVIVED = 3  # invisible time ended; a copy went to the retry topic
    DEAD_LETTERED = 4  # a copy went to the DLQ (retries exhausted or forwarded)
    DROPPED = 5  # the message left the store (retention) before it could be redelivered
    RESET = 6  # the group's offset was reset to queue_offset: forget the queue's state


@dataclass(frozen=True, slots=True)
class PopRecord:
    """One revive-log record; see the module docstring for the bytes."""

    kind: RecordKind
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    anchor: int = -1
    resolves: int = -1
    time_ms: int = 0
    invisible_ms: int = 0
    attempt: int = 0
    message_group: str = ""

    @property
    def key(self) -> QueueKey:
        return (self.group, self.topic, self.queue_id)

    def encode(self) -> bytes:
        group, topic, mgroup = self.group.encode(), self.topic.encode(), self.message_group.encode()
        return b"".join(
            (
                RECORD.pack(
                    RECORD_FORMAT,
                    self.kind,
                    self.queue_id,
                    self.queue_offset,
                    self.anchor,
                    self.resolves,
                    self.time_ms,
                    self.invisible_ms,
                    self.attempt,
                ),
                _U8.pack(len(group)),
                group,
                _U8.pack(len(topic)),
                topic,
                _U16.pack(len(mgroup)),
                mgroup,
            )
        )

    @classmethod
    def decode(cls, raw: bytes, revive_offset: int = -1) -> PopRecord:
        """Inverse of :meth:`encode`; CorruptionError names the revive offset if it fails."""
        try:
            header = RECORD.unpack_from(raw)
            fmt, kind, qid, offset, anchor, resolves, time_ms, inv_ms, attempt = header
            group, pos = _name(raw, RECORD.size, _U8)
            topic, pos = _name(raw, pos, _U8)
            mgroup, pos = _name(raw, pos, _U16)
            if fmt != RECORD_FORMAT or pos != len(raw):
                raise ValueError(f"format {fmt}, {len(raw) - pos} trailing bytes")
            return cls(
                RecordKind(kind),
                group,
                topic,
                qid,
                offset,
                anchor,
                resolves,
                time_ms,
                inv_ms,
                attempt,
                mgroup,
            )
        except (struct.error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise CorruptionError(
                f"revive record at revive offset {revive_offset} does not decode: {exc}"
            ) from exc


def _name(raw: bytes, pos: int, length: struct.Struct) -> tuple[str, int]:
    (size,) = length.unpack_from(raw, pos)
    start = pos + length.size
    if start + size > len(raw):
        raise ValueError("name runs past the end of the record")
    return raw[start : start + size].decode(), start + size


class ReviveLog:
    """Appends and replays records in ``REVIVE_TOPIC`` queue 0 of a store."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.next_offset = 0  # revive offset the next appended record will get

    def open(self) -> None:
        """Learn where the log ends (call once the store is open and dispatched)."""
        self._store.wait_dispatched()
        self.next_offset = self._store.max_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID)

    def append(
        self, records: list[PopRecord], companions: list[Message] | None = None
    ) -> list[int]:
        """Append ``companions`` then ``records`` in one call; return the records' offsets."""
        head = list(companions or ())
        messages = head + [
            Message(REVIVE_TOPIC, r.encode(), queue_id=REVIVE_QUEUE_ID) for r in records
        ]
        results = self._store.put_messages(messages)[len(head) :]
        offsets = [r.queue_offset for r in results]
        if offsets:
            self.next_offset = offsets[-1] + 1
        return offsets

    def replay(self, start: int) -> Iterator[tuple[int, PopRecord]]:
        """Yield ``(revive offset, record)`` from ``start`` (clamped to what is retained)."""
        store = self._store
        offset = max(start, store.min_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID))
        end = store.max_offset(REVIVE_TOPIC, REVIVE_QUEUE_ID)
        while offset < end:
            got = store.get_messages(
                QueueRead(REVIVE_TOPIC, REVIVE_QUEUE_ID, offset, _REPLAY_BATCH)
            )
            for msg in got.messages:
                yield msg.queue_offset, PopRecord.decode(msg.body, msg.queue_offset)
            if got.next_offset <= offset:
                break
            offset = got.next_offset
