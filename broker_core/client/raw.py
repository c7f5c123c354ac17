"""The client side of ``rmq.bulk.v1.Bulk/PullRaw`` (the wire format is drawn in
``broker_core.server.handlers.pull``): response bytes → :class:`RawPullBatch` or an error."""

from __future__ import annotations

import json
import struct
from typing import Final

import numpy as np

from broker_core.client.errors import error_for
from broker_core.client.model import RawPullBatch
from broker_core.errors import RocketMQError
from broker_core.protocol.status import Code

RAW_PULL_METHOD: Final = "/rmq.bulk.v1.Bulk/PullRaw"
_HEADER_LENGTH: Final = struct.Struct(">I")


def decode_raw_pull(response: bytes, offset: int) -> RawPullBatch:
    """The batch in one PullRaw response; the mapped error for a refused pull.

    MESSAGE_NOT_FOUND (nothing new) is an empty batch. An illegal offset raises
    InvalidOffsetError whose ``next_offset`` field is where the broker says to go.
    """
    try:
        (length,) = _HEADER_LENGTH.unpack_from(response, 0)
        header = json.loads(response[4 : 4 + length].decode("utf-8"))
        code, message = int(header["status"]["code"]), str(header["status"]["message"])
        count = int(header["count"])
    except (struct.error, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise RocketMQError(f"malformed PullRaw response: {exc}") from exc
    body_at = 4 + length + 4 * count
    if len(response) < body_at:
        raise RocketMQError(
            f"malformed PullRaw response: {count} units announced, {len(response)} bytes received"
        )
    next_offset = int(header.get("next_offset", offset))
    if code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
        raise error_for(code, message, next_offset=next_offset)
    sizes = np.frombuffer(response, ">i4", count, 4 + length).astype(np.int32)
    return RawPullBatch(
        response[body_at:],
        sizes,
        next_offset,
        int(header.get("min_offset", -1)),
        int(header.get("max_offset", -1)),
    )
