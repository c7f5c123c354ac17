"""The client side of ``rmq.bulk.v1.Bulk/PullRaw`` (the frame is drawn and coded in
``broker_core.protocol.pull_raw``): response bytes → :class:`RawPullBatch` or an error."""

from __future__ import annotations

from typing import Final

from broker_core.client.errors import error_for
from broker_core.client.model import RawPullBatch
from broker_core.protocol.pull_raw import PULL_PATH, decode_response
from broker_core.protocol.status import Code

RAW_PULL_METHOD: Final = PULL_PATH


def decode_raw_pull(response: bytes, offset: int) -> RawPullBatch:
    """The batch in one PullRaw response; the mapped error for a refused pull.

    MESSAGE_NOT_FOUND (nothing new) is an empty batch. An illegal offset raises
    InvalidOffsetError whose ``next_offset`` field is where the broker says to go.
    """
    frame = decode_response(response, offset=offset)
    if frame.code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
        raise error_for(frame.code, frame.message, next_offset=frame.next_offset)
    return RawPullBatch(
        frame.units, frame.sizes, frame.next_offset, frame.min_offset, frame.max_offset
    )
