"""Our side of SendBulk: columns → a bulk frame of finished units, and the answer → receipts.

Frames are :mod:`broker_core.protocol.bulk_send`'s: the units are built as arrays by
:mod:`broker_core.protocol.bulk_units`. Properties are written exactly as the broker
stores them for SendMessage (UNIQ_KEY, TAGS, KEYS, then user properties), so a bulk send
stores the same bytes. Message ids are drawn like ``wire``'s (one block per batch). Pure
functions; any thread.

>>> frame, ids = encode_bulk("t", [b"a"], tags=["x"], keys=[["k1", "k2"]],
...                          properties=[{"region": "eu"}])
>>> (f"UNIQ_KEY\\x01{ids.strings()[0]}\\x02TAGS\\x01x\\x02KEYS\\x01k1 k2\\x02region\\x01eu\\x02"
...  ).encode() in frame
True
>>> frame, ids = encode_bulk("t", [b"a", b"b"])  # bodies alone: ids made as an array
>>> all(f"UNIQ_KEY\\x01{i}\\x02".encode() in frame for i in ids.strings())
True
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Final

import numpy as np
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.client.convert import local_host
from broker_core.client.errors import check
from broker_core.client.message_ids import ID_BLOCKS
from broker_core.client.model import SendReceipt
from broker_core.errors import InvalidArgumentError
from broker_core.message import tag_hash
from broker_core.protocol.bulk_send import (
    SEND_METHOD,
    SERVICE_NAME,
    decode_response,
    encode_request,
)
from broker_core.protocol.property_codec import (
    ID_HEAD,
    encode_send,
    id_only_rows,
    split_terminated,
)

SEND_PATH: Final = f"/{SERVICE_NAME}/{SEND_METHOD}"


@dataclass(frozen=True, slots=True)
class IdBlock:
    """The message ids of one request: ``prefix`` + 8 hex digits of ``(first + i)``
    (the 32-bit sequence wraps), ``i`` in ``range(count)``; strings made on demand."""

    prefix: str
    first: int
    count: int
    # each id and a \x02 as the rows of a 2-D uint8 array, when the encoder made them
    id_rows: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return self.count

    def strings(self) -> list[str]:
        """The ids in order, made as one array of ASCII rows and split in one call."""
        if self.id_rows is not None:
            return split_terminated(self.id_rows)
        if not self.count:
            return []
        return split_terminated(_ids_only(self)[:, len(ID_HEAD) :])


def _hex_digits(first: int, count: int) -> np.ndarray:
    """The 8 upper-case hex digits of ``(first + i) & 0xFFFFFFFF`` for ``i`` in
    ``range(count)``, as a (count, 8) uint8 array of ASCII."""
    seq = (np.arange(count, dtype=np.uint64) + first).astype(np.uint32)
    return _HEX[(seq[:, None] >> _NIBBLE_SHIFTS) & 0xF]


_HEX: Final = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_NIBBLE_SHIFTS: Final = np.arange(28, -1, -4, dtype=np.uint32)


def _ids_only(ids: IdBlock) -> np.ndarray:
    """Each message's properties, the id alone (``property_codec.id_only_rows``), as one
    row of a 2-D uint8 array (every id has the same length), built with array operations."""
    rows = np.tile(np.frombuffer(ids.prefix.encode() + b"00000000", np.uint8), (ids.count, 1))
    rows[:, -8:] = _hex_digits(ids.first, ids.count)
    return id_only_rows(rows)


def encode_bulk(
    topic: str,
    bodies: Sequence[bytes],
    *,
    tags: Sequence[str | None] | None = None,
    keys: Sequence[Sequence[str] | None] | None = None,
    properties: Sequence[Mapping[str, str] | None] | None = None,
) -> tuple[bytes, IdBlock]:
    """(the SendBulk request, the message ids given) for plain messages as columns."""
    count = len(bodies)
    if not count:
        raise InvalidArgumentError("send_batch needs at least one message")
    for name, column in (("tags", tags), ("keys", keys), ("properties", properties)):
        if column is not None and len(column) != count:
            raise InvalidArgumentError(f"{name} has {len(column)} entries for {count} bodies")
    prefix, first = ID_BLOCKS.reserve(count)
    ids = IdBlock(prefix.decode(), first, count)
    encoded: Sequence[bytes] | np.ndarray
    if tags is None and keys is None and properties is None:
        encoded = _ids_only(ids)
        ids = IdBlock(ids.prefix, first, count, encoded[:, len(ID_HEAD) :])
    else:
        none = [None] * count
        encoded = [
            encode_send(*row)
            for row in zip(
                ids.strings(), tags or none, keys or none, properties or none, strict=True
            )
        ]
    frame = encode_request(
        topic,
        bodies,
        encoded,
        born_timestamp_ms=time.time_ns() // 1_000_000,
        born_host=local_host(),
        tags_codes=[0] * count if tags is None else [tag_hash(tag) for tag in tags],
    )
    return frame, ids


def bulk_receipts(response: bytes, ids: IdBlock, *, receipts: bool = True) -> list[SendReceipt]:
    """The receipts of a SendBulk answer (``[]`` when ``receipts`` is False: the answer
    is checked all the same); its error when the status is not OK."""
    status, offsets = decode_response(response)
    check(pb.Status(code=int(status.get("code", 0)), message=str(status.get("message", ""))))
    if len(offsets) != len(ids):
        raise InvalidArgumentError(
            f"broker answered {len(offsets)} offsets for {len(ids)} messages"
        )
    if not receipts:
        return []
    return make_receipts(ids.strings(), offsets)


# SendReceipt's slots, set directly: a frozen dataclass's __init__ goes through
# object.__setattr__ per field, twice the cost of these C-level maps (issue 14).
_RECEIPT_SLOTS: Final = tuple(
    vars(SendReceipt)[name].__set__
    for name in ("message_id", "offset", "transaction_id", "recall_handle")
)


def make_receipts(message_ids: Sequence[str], offsets: Sequence[int]) -> list[SendReceipt]:
    """``[SendReceipt(message_ids[i], offsets[i], "", "")]``, one per id (the two of one
    length), built without a Python-level step per receipt."""
    count = len(message_ids)
    if len(offsets) != count:
        raise InvalidArgumentError(f"{len(offsets)} offsets for {count} message ids")
    out = list(map(SendReceipt.__new__, repeat(SendReceipt, count)))
    set_id, set_offset, set_txn, set_recall = _RECEIPT_SLOTS
    for setter, values in (
        (set_id, message_ids),
        (set_offset, offsets),
        (set_txn, repeat("", count)),
        (set_recall, repeat("", count)),
    ):
        deque(map(setter, out, values), maxlen=0)
    return out
