"""``rmq.bulk.v1.Bulk/SendBulk`` frames: many plain messages of one topic as columns.

The mirror of PullRaw for producers (as Kafka's producer ships record batches): our
client encodes a batch column by column (numpy for the length and CRC columns, one join
per column), the broker checks it with array operations and one pass over the
properties, and stores it through the same path as SendMessage's column batches, so the
bytes stored are those SendMessage stores for the same messages.

Request bytes (integers big-endian)::

    offset  size     field
    0       4        header_length N      uint32
    4       N        header               UTF-8 JSON {"topic", "count", "born_timestamp_ms",
                                          "born_host"}
    …       4·count  body lengths         int32, each ≥ 1
    …       4·count  body CRC32s          uint32 (the broker recomputes and compares them)
    …       4·count  properties lengths   int32
    …       Σ        bodies               back to back
    …       Σ        properties           back to back, each as stored: ``name \\x01 value
                                          \\x02`` repeated, UNIQ_KEY first, then TAGS and
                                          KEYS when present, then user properties

Response bytes::

    0       4        header_length N      uint32
    4       N        header               UTF-8 JSON {"status": {"code", "message"}, "count"}
    …       8·count  queue offsets        int64, one per message in request order

``status.code`` is an ``apache.rocketmq.v2.Code``; the batch is stored whole or not at all.

>>> frame = encode_request("t", [b"ab", b"c"], [b"UNIQ_KEY\\x01A\\x02", b"UNIQ_KEY\\x01B\\x02"],
...                        born_timestamp_ms=5, born_host="10.0.0.1")
>>> req = decode_request(frame)
>>> req.topic, req.bodies, req.properties, req.body_crcs.tolist() == [0x9E83486D, 0x06B9DF6F]
('t', [b'ab', b'c'], [b'UNIQ_KEY\\x01A\\x02', b'UNIQ_KEY\\x01B\\x02'], True)
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

from broker_core.errors import InvalidArgumentError, MessageCorruptedError

SERVICE_NAME: Final = "rmq.bulk.v1.Bulk"
SEND_METHOD: Final = "SendBulk"
HEADER_LENGTH: Final = struct.Struct(">I")
MAX_HEADER_BYTES: Final = 64 << 10


@dataclass(frozen=True, slots=True)
class BulkRequest:
    """A decoded SendBulk request; one entry per message in each list and array."""

    topic: str
    born_timestamp_ms: int
    born_host: str
    bodies: list[bytes]
    body_crcs: np.ndarray  # uint32, as the client computed them
    properties: list[bytes]


def _frame(header: dict[str, Any], *parts: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((HEADER_LENGTH.pack(len(head)), head, *parts))


def _lengths(items: Sequence[bytes]) -> np.ndarray:
    return np.fromiter(map(len, items), np.int64, len(items))


def encode_request(
    topic: str,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | np.ndarray,
    *,
    born_timestamp_ms: int,
    born_host: str,
) -> bytes:
    """The request frame (``properties`` already encoded as stored, one per body: a
    sequence of bytes, or a 2-D uint8 array whose rows are the properties, all of one
    length)."""
    if len(bodies) != len(properties):
        raise InvalidArgumentError(f"{len(bodies)} bodies but {len(properties)} properties")
    if isinstance(properties, np.ndarray):
        prop_lengths = np.full(len(properties), properties.shape[1], np.int64)
        prop_block = np.ascontiguousarray(properties, np.uint8).tobytes()
    else:
        prop_lengths, prop_block = _lengths(properties), b"".join(properties)
    crcs = np.fromiter(map(zlib.crc32, bodies), np.uint32, len(bodies))
    header = {
        "topic": topic,
        "count": len(bodies),
        "born_timestamp_ms": born_timestamp_ms,
        "born_host": born_host,
    }
    return _frame(
        header,
        _lengths(bodies).astype(">i4").tobytes(),
        crcs.astype(">u4").tobytes(),
        prop_lengths.astype(">i4").tobytes(),
        b"".join(bodies),
        prop_block,
    )


def _header(frame: bytes) -> tuple[dict[str, Any], int]:
    if len(frame) < HEADER_LENGTH.size:
        raise MessageCorruptedError("bulk frame shorter than its header length")
    (length,) = HEADER_LENGTH.unpack_from(frame)
    end = HEADER_LENGTH.size + length
    if length > MAX_HEADER_BYTES or end > len(frame):
        raise MessageCorruptedError(f"bulk frame header of {length} bytes does not fit")
    try:
        header = json.loads(frame[HEADER_LENGTH.size : end])
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


def _split(data: bytes, start: int, lengths: np.ndarray) -> tuple[list[bytes], int]:
    ends = (start + np.cumsum(lengths)).tolist()
    starts = [start, *ends[:-1]]
    return [data[a:b] for a, b in zip(starts, ends, strict=True)], ends[-1] if ends else start


def decode_request(frame: bytes) -> BulkRequest:
    """The request in ``frame``; MessageCorruptedError when its lengths do not add up."""
    header, pos = _header(frame)
    count = _field(header, "count", int)
    if count < 1:
        raise InvalidArgumentError(f"SendBulk carries no message (count {count})")
    columns = (
        np.frombuffer(frame, ">u4", 3 * count, pos)
        if pos + 12 * count <= len(frame)
        else np.zeros(0, ">u4")
    )
    if len(columns) != 3 * count:
        raise MessageCorruptedError(f"bulk frame too short for {count} messages")
    body_lens = columns[:count].astype(np.int64)
    prop_lens = columns[2 * count :].astype(np.int64)
    total = pos + 12 * count + int(body_lens.sum()) + int(prop_lens.sum())
    if int(body_lens.min()) < 1 or int(prop_lens.max()) > 0xFFFF or total != len(frame):
        raise MessageCorruptedError("bulk frame lengths do not add up to its size")
    bodies, at = _split(frame, pos + 12 * count, body_lens)
    properties, _ = _split(frame, at, prop_lens)
    return BulkRequest(
        _field(header, "topic", str),
        _field(header, "born_timestamp_ms", int),
        _field(header, "born_host", str),
        bodies,
        columns[count : 2 * count].astype(np.uint32),
        properties,
    )


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
