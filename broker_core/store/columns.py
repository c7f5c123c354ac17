"""The send path's one batch type: messages encoded as columns, ready to append.

Every append goes through a :class:`ColumnBatch`, whoever sends: the official
SendMessage, SendBulk and the 4.x batch (``encode_columns``: many plain messages of one
topic, built as arrays), and the per-message API that retry, DLQ, timer, schedule and
transaction internals use (``encode_messages``: ``Message`` objects of any kind, mixed
topics, transaction units). Below it there is one store put (``MessageStore.put_batch``),
one append (``CommitLog.append``), one packer (``packer.pack_units``) and one dispatch
record (``appended.Appended``), so a format or validation rule is written once.

The batch holds the finished units back to back in one buffer (``units``: header, body,
tail — topic length, topic, properties length, properties — as the commitlog will hold
them) and each message's 100-byte header once more as one record of
:data:`~broker_core.protocol.unit.HEADER_DTYPE` (``head``): the copy that fields are read
and written in. Everything known before the append is filled in; the append fills the
open fields (:data:`~broker_core.protocol.unit_crc.OPEN_FIELDS`: queue id, queue offset,
physical offset, store time and host) and writes the headers into ``units``. The unit
CRCs: a bulk frame's units arrive with each CRC computed by the client with the open
fields zero, and the packer patches them (:mod:`~broker_core.protocol.unit_crc`: no CRC
call per unit); the encoders here, which build the units for every other way in, keep
each tail's CRC, and the packer computes each unit CRC whole, once the fields are final
(one call a unit either way, and a patch on top would only add work: measured).

Validation happens here, before anything is stored: an oversize body or properties, a bad
topic, a property that does not encode, an integer the header cannot hold fails the whole
batch (MessageTooLargeError, PropertiesTooLargeError, InvalidTopicError,
InvalidPropertyError, InvalidArgumentError), naming the first offender.

>>> from broker_core.message import Message
>>> batch = encode_messages([Message("t", b"hi", queue_id=2, properties={"KEYS": "k"})],
...                         max_body_bytes=64, max_properties_bytes=64)
>>> len(batch), batch.topics, batch.queue_ids.tolist(), batch.sizes.tolist(), batch.index_keys
(1, ['t'], [2], [113], [['k']])
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from broker_core.errors import MessageTooLargeError, PropertiesTooLargeError
from broker_core.message import PROPERTY_TAGS, Message, tag_hash
from broker_core.protocol import unit as layout
from broker_core.protocol.unit_builder import plain_head, plain_tails, unit_sizes
from broker_core.store import codec

# Below this many messages numpy's fixed cost per call exceeds a Python loop's work.
SMALL_BATCH = 16

QueueKey = tuple[str, int]


@dataclass(slots=True)
class ColumnBatch:
    """Encoded messages; every array and list has one entry per message, in order.

    ``units`` holds the units back to back, unit ``i`` at ``starts[i]`` (its header bytes
    there are only placeholders until the packer writes ``head`` over them); ``head``
    holds the headers with the open fields still zero but for queue ids, which may be
    chosen after encoding (``queue_ids`` setter): the broker picks them. Until packed, its
    ``unit_crc`` is either not computed yet (``tail_crcs`` set) or each unit's CRC with
    the open fields zero (``tail_crcs`` None: a bulk frame's units). A batch belongs
    to the thread sending it; the append writes its results into ``head``.
    """

    head: np.ndarray  # records of HEADER_DTYPE, contiguous
    raw: memoryview  # the same header bytes, flat (format "B")
    units: bytearray  # the units back to back
    known_starts: np.ndarray | None  # int64: where each unit starts in ``units`` (None:
    # not yet computed, see ``starts``)
    topics: list[str]
    index_keys: list[list[str]]  # UNIQ_KEY then KEYS, per message
    # Views of header columns, made once: a field view costs as much as packing a header.
    sizes: np.ndarray = field(init=False)  # total_size: each whole unit's bytes
    queue_offsets: np.ndarray = field(init=False)
    physical_offsets: np.ndarray = field(init=False)
    tags_codes: np.ndarray = field(init=False)
    # queue_rows() as found while encoding Message objects (dropped when queue ids change)
    known_rows: dict[QueueKey, list[int]] | None = field(default=None, init=False)
    # Each tail's CRC when the unit CRCs are not computed yet (the encoders' batches: the
    # packer computes each whole once the open fields are filled); None when each
    # header's unit_crc is the CRC with the open fields zero (a bulk frame's units), which
    # the packer patches
    tail_crcs: list[int] | None = field(default=None, init=False)
    # the largest queue offset assign_queue_offsets gave (None: not assigned that way)
    max_queue_offset: int | None = field(default=None, init=False)
    # the properties back to back when a bulk frame's were ids alone, of one length
    # (``broker.batch.UnitsBatch.id_text``), for message trace
    id_text: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        head = self.head
        self.sizes = head["total_size"]
        self.queue_offsets = head["queue_offset"]
        self.physical_offsets = head["physical_offset"]
        self.tags_codes = head["tags_code"]

    def __len__(self) -> int:
        return len(self.head)

    @property
    def starts(self) -> np.ndarray:
        """Where each unit starts in ``units`` (int64), computed once when needed."""
        if self.known_starts is None:
            sizes = self.sizes.astype(np.int64)
            self.known_starts = np.cumsum(sizes) - sizes
        return self.known_starts

    def unit_start(self, row: int) -> int:
        """Where unit ``row`` starts in ``units``."""
        return 0 if row == 0 else int(self.starts[row])

    def body_bytes(self) -> int:
        """The bodies' bytes, all messages together."""
        return int(self.head["body_length"].sum())

    @property
    def topic(self) -> str:
        """The first message's topic (the converters' batches have only one)."""
        return self.topics[0]

    @property
    def queue_ids(self) -> np.ndarray:
        return self.head["queue_id"]

    @queue_ids.setter
    def queue_ids(self, queue_ids: np.ndarray | int) -> None:
        self.head["queue_id"] = queue_ids
        self.known_rows = None

    @property
    def born_ms(self) -> np.ndarray:
        return self.head["born_timestamp_ms"]

    def queue_rows(self) -> dict[QueueKey, list[int]]:
        """The rows of each (topic, queue id), in batch order; rows of prepared or
        rolled-back transaction units (stored, never queued) are in none."""
        if self.known_rows is not None:
            return self.known_rows
        if len(self) >= SMALL_BATCH:
            return _queue_rows_vectorised(self)
        rows: dict[QueueKey, list[int]] = {}
        head = self.head
        flags, queue_ids = head["sys_flag"].tolist(), head["queue_id"].tolist()
        for row, (topic, queue_id, flag) in enumerate(
            zip(self.topics, queue_ids, flags, strict=True)
        ):
            if (flag & layout.SYSFLAG_TRANSACTION_MASK) not in layout.NOT_IN_QUEUE:
                rows.setdefault((topic, queue_id), []).append(row)
        return rows


def queue_blocks(count: int, first: int, queues: int) -> tuple[np.ndarray, np.ndarray]:
    """(queue of each block, rows in each block) for ``count`` messages spread from queue
    ``first`` as :func:`spread_in_blocks` spreads them (round robin's counts per queue).

    >>> [a.tolist() for a in queue_blocks(5, 3, 4)]
    [[3, 0, 1, 2], [2, 1, 1, 1]]
    """
    blocks = min(count, queues)
    sizes = np.full(blocks, count // queues, np.int64)
    sizes[: count % queues] += 1
    return (first + np.arange(blocks)) % queues, sizes


def spread_in_blocks(batch: ColumnBatch, first: int, queues: int) -> None:
    """Give a one-topic batch of plain messages queue ids as round robin from ``first``
    would (message ``i`` to queue ``(first + i) % queues``) in counts, but in contiguous
    blocks: the first ``n % queues`` queues from ``first`` get ``n // queues + 1`` rows,
    the others ``n // queues``, each queue's rows side by side in batch order (so its
    units lie side by side in the commitlog). Sets ``known_rows`` as well.

    >>> from broker_core.message import Message
    >>> batch = encode_messages([Message("t", b"x")] * 5, max_body_bytes=9,
    ...                         max_properties_bytes=9)
    >>> spread_in_blocks(batch, 3, 4)
    >>> batch.queue_ids.tolist(), batch.queue_rows()
    ([3, 3, 0, 1, 2], {('t', 3): [0, 1], ('t', 0): [2], ('t', 1): [3], ('t', 2): [4]})
    """
    if len(batch) == 1:  # a single send: no arrays to build (~5 µs of numpy calls)
        queue = first % queues
        batch.queue_ids = queue
        batch.known_rows = {(batch.topic, queue): [0]}
        return
    queue_of_block, sizes = queue_blocks(len(batch), first, queues)
    batch.queue_ids = np.repeat(queue_of_block, sizes)
    ends = np.cumsum(sizes).tolist()
    topic = batch.topic
    batch.known_rows = {
        (topic, queue): list(range(end - size, end))
        for queue, size, end in zip(queue_of_block.tolist(), sizes.tolist(), ends, strict=True)
    }


def _queue_rows_vectorised(batch: ColumnBatch) -> dict[QueueKey, list[int]]:
    names = list(dict.fromkeys(batch.topics))
    topic_ids = (
        np.zeros(len(batch), np.int64)
        if len(names) == 1
        else np.array([names.index(t) for t in batch.topics], np.int64)
    )
    keys = (topic_ids << 32) | (batch.head["queue_id"].astype(np.int64) & 0xFFFFFFFF)
    tran = batch.head["sys_flag"] & layout.SYSFLAG_TRANSACTION_MASK
    queued = np.flatnonzero(~np.isin(tran, layout.NOT_IN_QUEUE))
    order = queued[np.argsort(keys[queued], kind="stable")]
    cuts = np.flatnonzero(keys[order][1:] != keys[order][:-1]) + 1
    out: dict[QueueKey, list[int]] = {}
    for rows in np.split(order, cuts):
        if len(rows):
            out[(batch.topics[rows[0]], int(batch.head["queue_id"][rows[0]]))] = rows.tolist()
    return out


def encode_columns(
    topic: str,
    bodies: list[bytes],
    properties: Sequence[bytes],
    *,
    body_crcs: Sequence[int],
    tags_codes: Sequence[int],
    born_ms: Sequence[int],
    born_host: tuple[str, int],
    index_keys: list[list[str]],
    max_body_bytes: int,
    max_properties_bytes: int,
) -> ColumnBatch:
    """Plain (NORMAL) messages of one topic, built as the client builds SendBulk's units
    (:mod:`broker_core.protocol.unit_builder`); ``properties`` come encoded
    (:mod:`broker_core.protocol.property_codec`) and checked by the caller's converter.

    Queue ids are left at -1 for the broker to choose. Raises MessageTooLargeError or
    PropertiesTooLargeError (naming the largest) and InvalidTopicError.
    """
    topic_head = layout.topic_head(topic)
    body_lens = np.fromiter(map(len, bodies), np.int64, len(bodies))
    prop_lens = np.fromiter(map(len, properties), np.int64, len(properties))
    if len(body_lens) and int(body_lens.max()) > max_body_bytes:
        raise MessageTooLargeError(
            f"message body is {int(body_lens.max())} bytes, over the limit of {max_body_bytes}"
        )
    limit = min(max_properties_bytes, 0xFFFF)
    if len(prop_lens) and int(prop_lens.max()) > limit:
        raise PropertiesTooLargeError(
            f"properties are {int(prop_lens.max())} bytes encoded, over the limit of {limit}"
        )
    tails = plain_tails(topic_head, properties)
    sizes = unit_sizes(body_lens, len(topic_head) + 2 + prop_lens)
    head = plain_head(sizes, body_lens, body_crcs, born_ms=born_ms, tags_codes=tags_codes)
    head["born_host_ip"] = np.void(codec.ip4(born_host[0]))
    head["born_host_port"] = born_host[1]
    head["queue_id"] = -1
    raw = head.view(np.uint8).data
    units, starts = join_units(raw, bodies, tails), np.cumsum(sizes) - sizes
    batch = ColumnBatch(head, raw, units, starts, [topic] * len(bodies), index_keys)
    batch.tail_crcs = list(map(zlib.crc32, tails))  # the unit CRCs: whole, when packed
    return batch


def join_units(raw: memoryview, bodies: Sequence[bytes], tails: Sequence[bytes]) -> bytearray:
    """The units back to back, with header placeholders from ``raw``."""
    size = layout.HEADER_SIZE
    pieces: list[bytes | memoryview] = []
    for at, body, tail in zip(range(0, len(raw), size), bodies, tails, strict=True):
        pieces += (raw[at : at + size], body, tail)
    return bytearray().join(pieces)


def encode_messages(
    messages: Sequence[Message], *, max_body_bytes: int, max_properties_bytes: int
) -> ColumnBatch:
    """Validate and encode ``Message`` objects (any kind, any topics) as one batch."""
    raw = bytearray(layout.HEADER_SIZE * len(messages))
    bodies, tails, topics, index_keys = [], [], [], []
    rows: dict[QueueKey, list[int]] = {}  # queue_rows(), cheaper here than from the headers
    crc32, size_limit = zlib.crc32, min(max_properties_bytes, 0xFFFF)
    encode_properties, topic_head, keys_of = (
        codec.encode_properties,
        layout.topic_head,
        codec.index_keys,
    )
    tail_crcs: list[int] = []
    at = 0
    for row, msg in enumerate(messages):
        body = msg.body if type(msg.body) is bytes else bytes(msg.body)
        if len(body) > max_body_bytes:
            raise MessageTooLargeError(
                f"message body is {len(body)} bytes, over the limit of {max_body_bytes}"
            )
        props = encode_properties(msg.properties)
        if len(props) > size_limit:
            raise PropertiesTooLargeError(
                f"properties are {len(props)} bytes encoded, over the limit of {size_limit}"
            )
        tail = topic_head(msg.topic) + len(props).to_bytes(2, "big") + props
        size = layout.HEADER_SIZE + len(body) + len(tail)
        _pack_known(raw, row, msg, size, crc32(body), len(body))
        tail_crcs.append(crc32(tail))
        bodies.append(body)
        tails.append(tail)
        topics.append(msg.topic)
        index_keys.append(keys_of(msg.properties))
        if (msg.sys_flag & layout.SYSFLAG_TRANSACTION_MASK) not in layout.NOT_IN_QUEUE:
            rows.setdefault((msg.topic, msg.queue_id), []).append(row)
        at += layout.HEADER_SIZE
    head = np.frombuffer(raw, layout.HEADER_DTYPE)  # writable: it is the bytearray's memory
    view = memoryview(raw)
    batch = ColumnBatch(head, view, join_units(view, bodies, tails), None, topics, index_keys)
    batch.known_rows = rows
    batch.tail_crcs = tail_crcs
    return batch


def _pack_known(
    raw: bytearray, row: int, msg: Message, size: int, body_crc: int, body_length: int
) -> None:
    """Write the header fields known before the append (the rest stays zero)."""
    host, port = msg.born_host
    try:  # the pack also checks every integer fits its field
        layout.HEADER.pack_into(
            raw,
            row * layout.HEADER_SIZE,
            size,
            layout.MESSAGE_MAGIC,
            0,
            body_crc,
            msg.queue_id,
            msg.flag,
            0,
            0,
            msg.sys_flag,
            msg.born_timestamp_ms,
            codec.ip4(host),
            port,
            0,
            codec.ZERO_IP,
            0,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
            tag_hash(msg.properties.get(PROPERTY_TAGS)),
            body_length,
        )
    except struct.error:
        codec.explain_bad_ranges(msg, port)
