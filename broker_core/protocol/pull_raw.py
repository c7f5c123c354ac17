"""``rmq.bulk.v1.Bulk/PullRaw`` frames: the stored units of one queue, shipped as they are.

Building one protobuf ``Message`` per message, then taking it apart again, is what costs
most when a reader wants a million rows; our own client's bulk path (the Spark source,
backlog drains) asks this method and decodes the units as columns
(``broker_core.client.columnar``). The broker encodes the response
(``server/handlers/pull.py``), our client decodes it (``client/raw.py``), both with this
module. The mirror for producers is :mod:`broker_core.protocol.bulk_send`.

Request: one UTF-8 JSON object (unknown fields are BAD_REQUEST)::

    group                    consumer group (must exist, as for PullMessage)
    topic, queue_id, offset  the queue and the first offset wanted
    max_count                units wanted (the broker caps it at max_raw_pull_batch)
    max_bytes?               byte budget of the units (DEFAULT_MAX_BYTES, at most
                             MAX_BYTES_LIMIT); at least one unit is sent when one is found
    filter_type?, filter_expression?   "TAG" (default) or "SQL", as PullMessage's filter
    long_polling_timeout_ms? wait this long at the end of the queue (within the deadline)

Response bytes (integers big-endian)::

    offset   size      field
    0        4         header_length N       uint32
    4        N         header                UTF-8 JSON: {"status": {"code", "message"},
                                             "next_offset", "min_offset", "max_offset",
                                             "count"}
    4+N      4·count   unit sizes            int32, one per unit
    …        rest      units                 back to back, exactly as in the commitlog
                                             (:mod:`broker_core.protocol.unit`)

``status.code`` is an ``apache.rocketmq.v2.Code``: OK with units; MESSAGE_NOT_FOUND when
nothing new or nothing matched; ILLEGAL_OFFSET for an offset outside the queue (then
``next_offset`` is where to go); any other code for a refused request (``count`` 0, the
offsets may be absent). The units are not verified by either side's frame code: readers
check every unit's CRCs and offsets (``broker_core.store.raw_read``, ``client.columnar``).

>>> frame = encode_response({"code": 20000, "message": "OK"}, np.array([3, 2]), b"abcde",
...                         next_offset=9, min_offset=0, max_offset=12)
>>> got = decode_response(frame, offset=7)
>>> got.code, got.sizes.tolist(), bytes(got.units), got.next_offset, got.max_offset
(20000, [3, 2], b'abcde', 9, 12)
>>> decode_response(encode_refusal({"code": 40000, "message": "no"}), offset=7).next_offset
7
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from broker_core.errors import MessageCorruptedError

SERVICE_NAME: Final = "rmq.bulk.v1.Bulk"
PULL_METHOD: Final = "PullRaw"
PULL_PATH: Final = f"/{SERVICE_NAME}/{PULL_METHOD}"
DEFAULT_MAX_BYTES: Final = 8 << 20
MAX_BYTES_LIMIT: Final = 32 << 20
HEADER_LENGTH: Final = struct.Struct(">I")
REQUEST_FIELDS: Final = frozenset(
    {
        "group",
        "topic",
        "queue_id",
        "offset",
        "max_count",
        "max_bytes",
        "filter_type",
        "filter_expression",
        "long_polling_timeout_ms",
    }
)


@dataclass(frozen=True, slots=True)
class RawPullResponse:
    """A decoded PullRaw response: the status and, when OK, the units (unverified)."""

    code: int
    message: str
    sizes: np.ndarray  # int32, one per unit
    units: bytes  # the units back to back
    next_offset: int
    min_offset: int  # -1 when the broker sent none (a refused request)
    max_offset: int


def _frame(
    header: dict[str, Any], sizes: bytes = b"", units: bytes | bytearray | memoryview = b""
) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join((HEADER_LENGTH.pack(len(head)), head, sizes, units))


def encode_response(
    status: dict[str, Any],
    sizes: np.ndarray,
    units: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    min_offset: int,
    max_offset: int,
) -> bytes:
    """One response: ``status`` (``{"code", "message"}``), the queue's bounds and the
    units (``sizes`` each; none for a status other than OK)."""
    header = {
        "status": status,
        "count": len(sizes),
        "next_offset": next_offset,
        "min_offset": min_offset,
        "max_offset": max_offset,
    }
    return _frame(header, np.asarray(sizes).astype(">i4").tobytes(), units)


def encode_refusal(status: dict[str, Any]) -> bytes:
    """The response to a request refused before any queue was read (no bounds, no units)."""
    return _frame({"status": status, "count": 0})


def decode_response(frame: bytes, *, offset: int) -> RawPullResponse:
    """The response in ``frame`` (``offset``: the request's, the next offset when the
    broker names none); MessageCorruptedError when it does not parse."""
    try:
        (length,) = HEADER_LENGTH.unpack_from(frame, 0)
        header = json.loads(frame[4 : 4 + length].decode("utf-8"))
        code, message = int(header["status"]["code"]), str(header["status"]["message"])
        count = int(header["count"])
        next_offset = int(header.get("next_offset", offset))
        bounds = int(header.get("min_offset", -1)), int(header.get("max_offset", -1))
    except (
        struct.error,
        UnicodeDecodeError,
        ValueError,
        LookupError,
        TypeError,
        AttributeError,
    ) as exc:
        raise MessageCorruptedError(f"malformed PullRaw response: {exc}") from exc
    body_at = 4 + length + 4 * count
    if count < 0 or len(frame) < body_at:
        raise MessageCorruptedError(
            f"malformed PullRaw response: {count} units announced, {len(frame)} bytes received"
        )
    sizes = np.frombuffer(frame, ">i4", count, 4 + length).astype(np.int32)
    return RawPullResponse(code, message, sizes, frame[body_at:], next_offset, *bounds)
