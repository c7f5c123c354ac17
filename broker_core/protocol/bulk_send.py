"""``rmq.bulk.v1.Bulk/SendBulk`` frames: many plain messages of one topic as finished units.

The mirror of PullRaw for producers (as Kafka's producer ships record batches): our
client encodes the batch as the commitlog units the broker will store
(:mod:`broker_core.protocol.bulk_units`, built as arrays), with the fields only the broker
knows left zero — queue id, queue offset, physical offset, store time and host, born
host — and each unit CRC computed with them zero. The broker checks the frame's CRC,
checks every unit with array operations, fills those fields as numpy assignments,
patches the unit CRCs (:mod:`broker_core.protocol.unit_crc`) and appends the block
through the same path as every other send, so the bytes stored are those SendMessage
stores for the same messages.

Request bytes (integers big-endian)::

    offset  size     field
    0       1        version              uint8, FRAME_VERSION; any other is refused
    1       4        frame_crc            uint32, CRC32 of every byte after this field
    5       4        header_length N      uint32
    9       N        header               UTF-8 JSON {"topic", "count", "born_host"}
    …       4·count  unit sizes           int32, each unit's total_size
    …       Σ        units                back to back (:mod:`broker_core.protocol.unit`)

Response bytes::

    0       4        header_length N      uint32
    4       N        header               UTF-8 JSON {"status": {"code", "message"}, "count"}
    …       8·count  queue offsets        int64, one per message in request order

``status.code`` is an ``apache.rocketmq.v2.Code``; the batch is stored whole or not at all.

>>> frame = encode_request("t", [b"ab", b"c"], [b"UNIQ_KEY\\x01A\\x02", b"UNIQ_KEY\\x01B\\x02"],
...                        born_timestamp_ms=5, born_host="10.0.0.1")
>>> req = decode_request(frame)
>>> req.topic, req.born_host, req.sizes.tolist(), len(req.units)
('t', '10.0.0.1', [117, 116], 233)
>>> decode_response(encode_response({"code": 20000, "message": "OK"}, [7, 8]))
({'code': 20000, 'message': 'OK'}, [7, 8])
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from broker_core.errors import InvalidArgumentError, MessageCorruptedError, UnsupportedError
from broker_core.protocol import unit as layout
from broker_core.protocol.bulk_units import build_units

SERVICE_NAME: Final = "rmq.bulk.v1.Bulk"
SEND_METHOD: Final = "SendBulk"
FRAME_VERSION: Final = 2
HEADER_LENGTH: Final = struct.Struct(">I")
_PREFIX: Final = struct.Struct(">BI")  # version, frame CRC
MAX_HEADER_BYTES: Final = 64 << 10


@dataclass(frozen=True, slots=True)
class BulkRequest:
    """A decoded SendBulk request: its units not yet checked but for their count and
    sizes adding up (and the frame CRC matching)."""

    topic: str
    born_host: str
    sizes: np.ndarray  # int64, one per unit
    units: memoryview  # the units back to back (a view of the frame)

    def __len__(self) -> int:
        return len(self.sizes)


def _frame(header: dict[str, Any], *parts: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((HEADER_LENGTH.pack(len(head)), head, *parts))


def encode_request(
    topic: str,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | np.ndarray,
    *,
    born_timestamp_ms: int,
    born_host: str,
    tags_codes: Sequence[int] | None = None,
) -> bytes:
    """The request frame (``properties`` already encoded as stored, one per body: a
    sequence of bytes, or a 2-D uint8 array whose rows are the properties, all of one
    length; ``tags_codes`` default to the TAGS found in them)."""
    if len(bodies) != len(properties):
        raise InvalidArgumentError(f"{len(bodies)} bodies but {len(properties)} properties")
    units, sizes = build_units(
        topic, bodies, properties, born_timestamp_ms=born_timestamp_ms, tags_codes=tags_codes
    )
    header = {"topic": topic, "count": len(bodies), "born_host": born_host}
    body = _frame(header, sizes.astype(">i4").tobytes())
    crc = zlib.crc32(units, zlib.crc32(body))
    return b"".join((_PREFIX.pack(FRAME_VERSION, crc), body, units))


def _header(frame: bytes | memoryview, start: int = 0) -> tuple[dict[str, Any], int]:
    if len(frame) < start + HEADER_LENGTH.size:
        raise MessageCorruptedError("bulk frame shorter than its header length")
    (length,) = HEADER_LENGTH.unpack_from(frame, start)
    end = start + HEADER_LENGTH.size + length
    if length > MAX_HEADER_BYTES or end > len(frame):
        raise MessageCorruptedError(f"bulk frame header of {length} bytes does not fit")
    try:
        header = json.loads(bytes(frame[start + HEADER_LENGTH.size : end]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageCorruptedError(f"bulk frame header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise MessageCorruptedError("bulk frame header is not a JSON object")
    return header, end


def _field(header: dict[str, Any], name: str, kind: type) -> Any:
    value = header.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidArgumentError(f"SendBulk: {name} must be a {kind.__name__}, got {value!r}")
    return value


def decode_request(frame: bytes) -> BulkRequest:
    """The request in ``frame``: UnsupportedError for another frame version,
    MessageCorruptedError when the frame CRC or the unit sizes do not add up."""
    if len(frame) < _PREFIX.size:
        raise MessageCorruptedError("bulk frame shorter than its version and CRC")
    version, crc = _PREFIX.unpack_from(frame)
    if version != FRAME_VERSION:
        raise UnsupportedError(
            f"SendBulk frame version {version} is not supported (this broker reads "
            f"version {FRAME_VERSION})"
        )
    view = memoryview(frame)
    if zlib.crc32(view[_PREFIX.size :]) != crc:
        raise MessageCorruptedError("SendBulk frame CRC mismatch: the frame was damaged")
    header, pos = _header(view, _PREFIX.size)
    count = _field(header, "count", int)
    if count < 1:
        raise InvalidArgumentError(f"SendBulk carries no message (count {count})")
    if pos + 4 * count > len(frame):
        raise MessageCorruptedError(f"bulk frame too short for {count} unit sizes")
    sizes = np.frombuffer(frame, ">i4", count, pos).astype(np.int64)
    units = view[pos + 4 * count :]
    if int(sizes.min()) < layout.MIN_UNIT_BYTES or int(sizes.sum()) != len(units):
        raise MessageCorruptedError(
            f"SendBulk unit sizes add up to {int(sizes.sum())} bytes, the frame holds "
            f"{len(units)} (or a unit is shorter than {layout.MIN_UNIT_BYTES})"
        )
    return BulkRequest(_field(header, "topic", str), _field(header, "born_host", str), sizes, units)


def encode_response(status: dict[str, Any], offsets: Sequence[int] | np.ndarray) -> bytes:
    """The response frame: the status and, when OK, one queue offset per message."""
    array = np.asarray(offsets, np.int64)
    return _frame({"status": status, "count": len(array)}, array.astype(">i8").tobytes())


def decode_response(frame: bytes) -> tuple[dict[str, Any], list[int]]:
    """(status, queue offsets) of a response frame."""
    header, pos = _header(frame)
    count = _field(header, "count", int)
    if pos + 8 * count != len(frame) or not isinstance(header.get("status"), dict):
        raise MessageCorruptedError("bulk response does not match its header")
    return header["status"], np.frombuffer(frame, ">i8", count, pos).tolist()
