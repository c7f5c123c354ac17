"""Column batches: many plain messages of one topic, encoded and packed as arrays.

The send path's fast lane. A batch of ordinary messages (no transaction, no delay, one
topic, one born host) is held as columns instead of one object per message, and its
units are packed with numpy: the 100-byte headers of the whole batch are one record
array, only the CRCs and the final join touch messages one by one. The bytes are
exactly those ``codec.pack_unit_into`` writes for the same message (tests compare
them), so readers, recovery and replication cannot tell the lanes apart.

Validation happens in :func:`encode_columns`, outside the commitlog's lock, as in
``codec.encode``: an oversize body or properties, or a bad topic, fails the whole batch
before anything is stored.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from broker_core.errors import MessageTooLargeError, PropertiesTooLargeError
from broker_core.protocol import unit as layout
from broker_core.store import codec


@dataclass(slots=True)
class ColumnBatch:
    """Encoded messages of one topic; every array and list has one entry per message."""

    topic: str
    queue_ids: np.ndarray  # int32, chosen by the broker
    bodies: list[bytes]
    body_crcs: np.ndarray  # uint32
    tails: list[bytes]  # topic length, topic, properties length, properties
    tail_crcs: list[int]
    tags_codes: np.ndarray  # int64
    born_ms: np.ndarray  # int64
    born_ip: bytes  # 4 bytes, IPv4
    born_port: int
    index_keys: list[list[str]]  # UNIQ_KEY then KEYS, per message
    sizes: np.ndarray  # int64, whole unit

    def __len__(self) -> int:
        return len(self.bodies)


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
    """Check sizes and build the tails; ``properties`` come encoded (``name\\x01value\\x02``).

    Queue ids are left at -1 for the broker to choose. Raises MessageTooLargeError or
    PropertiesTooLargeError (naming the first offender) and InvalidTopicError.
    """
    head = codec._topic_head(topic)
    body_lens = np.fromiter(map(len, bodies), np.int64, len(bodies))
    prop_lens = np.fromiter(map(len, properties), np.int64, len(properties))
    if len(body_lens) and int(body_lens.max()) > max_body_bytes:
        size = int(body_lens.max())
        raise MessageTooLargeError(
            f"message body is {size} bytes, over the limit of {max_body_bytes}"
        )
    limit = min(max_properties_bytes, 0xFFFF)
    if len(prop_lens) and int(prop_lens.max()) > limit:
        raise PropertiesTooLargeError(
            f"properties are {int(prop_lens.max())} bytes encoded, over the limit of {limit}"
        )
    tails = [head + len(p).to_bytes(2, "big") + p for p in properties]
    host, port = born_host
    return ColumnBatch(
        topic,
        np.full(len(bodies), -1, np.int32),
        bodies,
        np.array(body_crcs, np.uint32),
        tails,
        [zlib.crc32(t) for t in tails],
        np.array(tags_codes, np.int64),
        np.array(born_ms, np.int64),
        codec._ip4(host),
        port,
        index_keys,
        layout.HEADER_SIZE + body_lens + len(head) + 2 + prop_lens,
    )


def assign_queue_offsets(batch: ColumnBatch, take_many: Callable[[int, int], int]) -> np.ndarray:
    """Queue offsets for every message, in order per queue; ``take_many(queue_id, n)``
    reserves ``n`` consecutive offsets of one queue and returns the first."""
    queue_ids = batch.queue_ids.astype(np.int64)
    counts = np.bincount(queue_ids)
    used = np.flatnonzero(counts)
    bases = np.zeros(len(counts), np.int64)
    for queue_id, count in zip(used.tolist(), counts[used].tolist(), strict=True):
        bases[queue_id] = take_many(queue_id, count)
    order = np.argsort(queue_ids, kind="stable")  # each queue's messages, in batch order
    firsts = np.cumsum(counts) - counts  # where each queue's run starts in ``order``
    offsets = np.empty(len(queue_ids), np.int64)
    offsets[order] = bases[queue_ids[order]] + np.arange(len(queue_ids)) - firsts[queue_ids[order]]
    return offsets


def pack_columns(
    batch: ColumnBatch,
    lo: int,
    hi: int,
    physical_offset: int,
    queue_offsets: np.ndarray,
    store_timestamp_ms: int,
    store_host: tuple[bytes, int],
) -> bytes:
    """The finished units of messages ``[lo, hi)``, placed from ``physical_offset``."""
    count = hi - lo
    sizes = batch.sizes[lo:hi]
    head = np.zeros(count, layout.HEADER_DTYPE)
    head["total_size"] = sizes
    head["magic"] = layout.MESSAGE_MAGIC
    head["body_crc"] = batch.body_crcs[lo:hi]
    head["queue_id"] = batch.queue_ids[lo:hi]
    head["queue_offset"] = queue_offsets[lo:hi]
    head["physical_offset"] = physical_offset + np.cumsum(sizes) - sizes
    head["born_timestamp_ms"] = batch.born_ms[lo:hi]
    head["born_host_ip"] = np.void(batch.born_ip)
    head["born_host_port"] = batch.born_port
    head["store_timestamp_ms"] = store_timestamp_ms
    head["store_host_ip"] = np.void(store_host[0])
    head["store_host_port"] = store_host[1]
    head["tags_code"] = batch.tags_codes[lo:hi]
    head["body_length"] = [len(b) for b in batch.bodies[lo:hi]]
    crc, size = zlib.crc32, layout.HEADER_SIZE
    with memoryview(head.tobytes()) as raw:  # the unit CRC covers header bytes 12..100
        head["unit_crc"] = [
            crc(raw[i * size + layout.CRC_START : (i + 1) * size], tail_crc)
            for i, tail_crc in enumerate(batch.tail_crcs[lo:hi])
        ]
    with memoryview(head.tobytes()) as raw:
        pieces: list[bytes | memoryview] = []
        for i, (body, tail) in enumerate(zip(batch.bodies[lo:hi], batch.tails[lo:hi], strict=True)):
            pieces += (raw[i * size : (i + 1) * size], body, tail)
        return b"".join(pieces)
