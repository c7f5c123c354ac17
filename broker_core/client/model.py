"""The values our client hands in and gets back (plain, picklable dataclasses)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class OutgoingMessage(NamedTuple):
    """One message to send; a plain tuple in this field order works as well.

    ``keys`` are the message's index keys (searchable with ``query_message``);
    ``message_group`` makes it a FIFO message (same group → same queue, in order);
    ``delivery_timestamp_ms`` (epoch ms) makes it a timed (DELAY) message.
    """

    body: bytes
    tag: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] | None = None
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None

    @classmethod
    def of(cls, item: Any) -> OutgoingMessage:
        """Accept an OutgoingMessage, a tuple in field order, or a bare body (bytes or str)."""
        if isinstance(item, OutgoingMessage):
            return item
        if isinstance(item, bytes | bytearray | memoryview | str):
            item = (item,)
        fields = list(item)
        body = fields[0]
        fields[0] = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return cls(*fields)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """What the broker said about one sent message.

    ``offset`` is the queue offset the message got (for a timed message: its offset in
    the timer's own queue); ``recall_handle`` is set for timed messages and cancels them.
    """

    message_id: str
    offset: int
    transaction_id: str = ""
    recall_handle: str = ""


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message read back from the broker; its body digest has been verified."""

    message_id: str
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_group: str | None = None
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    delivery_timestamp_ms: int | None = None
    born_host: str = ""
    store_host: str = ""
    delivery_attempt: int = 0
    message_type: str = "NORMAL"


@dataclass(frozen=True, slots=True)
class PullBatch:
    """One pull of one queue.

    ``messages`` are in offset order, all below ``next_offset``, where the next pull
    starts (it moves past filtered-out messages too). ``min_offset``/``max_offset`` are
    the queue's bounds: messages live in ``[min_offset, max_offset)``.
    """

    messages: list[ReceivedMessage]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class RawPullBatch:
    """One bulk pull of one queue: the stored units, undecoded and unverified.

    ``data`` holds ``len(sizes)`` units back to back (``sizes`` is an int32 numpy array);
    ``broker_core.client.columnar.decode_units`` checks and decodes them. Offsets as in
    :class:`PullBatch`.
    """

    data: bytes
    sizes: Any  # numpy int32 array
    next_offset: int
    min_offset: int
    max_offset: int

    @property
    def count(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One message queue from a route: where it lives and what it permits."""

    topic: str
    queue_id: int
    broker_name: str
    endpoint: str
    permission: str  # READ, WRITE, READ_WRITE or NONE
    accept_message_types: tuple[str, ...] = ()
