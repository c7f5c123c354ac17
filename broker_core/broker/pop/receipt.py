"""Receipt handles: the token a POP consumer gets with each message and hands back to ack.

A handle names one *delivery* of one message: which queue and offset it came from, and
which revive-log checkpoint issued it (the handle's version). It is opaque to clients:
the bytes below, then URL-safe base64 without padding. All integers are big-endian::

    offset size field
    0      1    format              uint8   FORMAT (1)
    1      4    queue_id            int32   queue the message was popped from
    5      8    queue_offset        int64   its logical offset in that queue
    13     8    checkpoint_offset   int64   revive-log offset of the checkpoint that issued
                                            this handle: the handle's version (unique, and
                                            the same after a broker restart)
    21     8    pop_time_ms         int64   when this delivery (or invisible change) began
    29     8    invisible_ms        int64   how long the message stays invisible from then
    37     1    topic_length        uint8
    38     t    topic               UTF-8   queue topic (the original or ``%RETRY%{group}``)
    …      1    broker_length       uint8
    …      b    broker_name         UTF-8
    …      4    crc32               uint32  CRC32 of every byte before it

RocketMQ packs similar fields (start offset, pop time, invisible time, revive queue,
topic type, broker name, queue id, offset) into a space-separated string; ours is
binary so one ``struct.Struct`` documents and checks it, and the CRC turns a mistyped or
truncated handle into :class:`InvalidReceiptHandleError` instead of a wrong ack. The CRC
is not a signature: a forged handle decodes, but acts only if it names the *current*
delivery of an in-flight message, which the service checks.

Pure functions, safe from any thread.

>>> h = ReceiptHandle("orders", 1, 42, 7, 1_000, 30_000, "broker-a")
>>> decode_handle(h.encode()) == h
True
>>> h.deadline_ms
31000
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from dataclasses import dataclass

from broker_core.errors import InvalidReceiptHandleError

FORMAT = 1
HEADER = struct.Struct(
    ">"
    "B"  # 0   format
    "i"  # 1   queue_id
    "q"  # 5   queue_offset
    "q"  # 13  checkpoint_offset
    "q"  # 21  pop_time_ms
    "q"  # 29  invisible_ms
)
LENGTH = struct.Struct(">B")
CRC = struct.Struct(">I")
MAX_NAME_BYTES = 255
MAX_HANDLE_CHARS = 1024  # longer input is rejected before decoding


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """The decoded form of a receipt handle; :meth:`encode` gives the string clients see."""

    topic: str
    queue_id: int
    queue_offset: int
    checkpoint_offset: int
    pop_time_ms: int
    invisible_ms: int
    broker_name: str

    @property
    def deadline_ms(self) -> int:
        """When the message becomes visible again unless acked or extended."""
        return self.pop_time_ms + self.invisible_ms

    def encode(self) -> str:
        """The opaque string form; :func:`decode_handle` inverts it."""
        topic = self.topic.encode()
        broker = self.broker_name.encode()
        if not 0 < len(topic) <= MAX_NAME_BYTES or len(broker) > MAX_NAME_BYTES:
            raise InvalidReceiptHandleError(
                f"topic {self.topic!r} or broker name {self.broker_name!r} too long for a handle"
            )
        raw = b"".join(
            (
                HEADER.pack(
                    FORMAT,
                    self.queue_id,
                    self.queue_offset,
                    self.checkpoint_offset,
                    self.pop_time_ms,
                    self.invisible_ms,
                ),
                LENGTH.pack(len(topic)),
                topic,
                LENGTH.pack(len(broker)),
                broker,
            )
        )
        raw += CRC.pack(zlib.crc32(raw))
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def check_scope(handle: ReceiptHandle, *, broker_name: str, topics: tuple[str, ...]) -> None:
    """InvalidReceiptHandleError unless ``handle`` is from ``broker_name`` for one of ``topics``.

    A handle from another broker or for another topic decodes but can never match an
    in-flight delivery here: it is a caller error, not a stale handle.
    """
    if handle.broker_name != broker_name:
        raise InvalidReceiptHandleError(
            f"receipt handle is from broker {handle.broker_name!r}, not {broker_name!r}"
        )
    if handle.topic not in topics:
        raise InvalidReceiptHandleError(
            f"receipt handle belongs to topic {handle.topic!r}, not {' or '.join(topics)}"
        )


def _b64decode(text: str) -> bytes:
    """URL-safe base64 with the padding put back; InvalidReceiptHandleError if malformed."""
    if not isinstance(text, str) or not text or len(text) > MAX_HANDLE_CHARS:
        raise InvalidReceiptHandleError("receipt handle must be a non-empty string")
    try:
        padded = text.encode("ascii") + b"=" * (-len(text) % 4)
        return base64.b64decode(padded, altchars=b"-_", validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as exc:
        raise InvalidReceiptHandleError(f"receipt handle is not base64url: {exc}") from None


def _read_name(raw: bytes, pos: int, what: str) -> tuple[str, int]:
    """A length-prefixed UTF-8 name at ``pos`` and the position after it."""
    if pos >= len(raw):
        raise InvalidReceiptHandleError(f"receipt handle ends before its {what}")
    (size,) = LENGTH.unpack_from(raw, pos)
    end = pos + 1 + size
    if end > len(raw):
        raise InvalidReceiptHandleError(f"receipt handle ends inside its {what}")
    try:
        return raw[pos + 1 : end].decode(), end
    except UnicodeDecodeError:
        raise InvalidReceiptHandleError(f"receipt handle {what} is not UTF-8") from None


def decode_handle(text: str) -> ReceiptHandle:
    """Parse a handle; raises InvalidReceiptHandleError for anything that does not decode.

    Checks, in order: base64url, minimum length, CRC32, format byte, name lengths and
    UTF-8, trailing bytes, and that offsets and times are non-negative.
    """
    raw = _b64decode(text)
    if len(raw) < HEADER.size + 2 + CRC.size:
        raise InvalidReceiptHandleError(f"receipt handle too short ({len(raw)} bytes)")
    body, (crc,) = raw[: -CRC.size], CRC.unpack_from(raw, len(raw) - CRC.size)
    if zlib.crc32(body) != crc:
        raise InvalidReceiptHandleError("receipt handle fails its checksum")
    fmt, queue_id, queue_offset, checkpoint, pop_time_ms, invisible_ms = HEADER.unpack_from(body)
    if fmt != FORMAT:
        raise InvalidReceiptHandleError(f"receipt handle format {fmt} is not {FORMAT}")
    topic, pos = _read_name(body, HEADER.size, "topic")
    broker, pos = _read_name(body, pos, "broker name")
    if pos != len(body):
        raise InvalidReceiptHandleError("receipt handle has trailing bytes")
    if not topic or min(queue_id, queue_offset, checkpoint, pop_time_ms, invisible_ms) < 0:
        raise InvalidReceiptHandleError("receipt handle holds an empty topic or negative field")
    return ReceiptHandle(
        topic, queue_id, queue_offset, checkpoint, pop_time_ms, invisible_ms, broker
    )
