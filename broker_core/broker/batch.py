"""The batch the front ends hand the broker: plain messages of one topic, as columns.

The three fast lanes of the send path — SendMessage's plain messages
(``server/convert_columns``), SendBulk (``server/convert_bulk``) and the 4.x batch
(``remoting_broker/send_columns``) — build one of these from their wire fields with the
protocol's helpers only (``protocol/message_rules``, ``property_codec``,
``unit_builder``) and hand it to ``Sending.send_batch``; the broker turns it into the
store's :class:`~broker_core.store.columns.ColumnBatch` (:func:`to_store_batch`), so no
front end knows the store's batch. Two kinds:

- :class:`PlainBatch`: each message's body, encoded properties
  (:mod:`~broker_core.protocol.property_codec`), body CRC, tag hash, index keys and born
  time, one born host; the broker lays out the units (``store.columns.encode_columns``).
- :class:`UnitsBatch`: the units already laid out as the commitlog holds them (a SendBulk
  frame's, checked, born host and time filled, unit CRCs patched for them), with their
  headers as records of :data:`~broker_core.protocol.unit.HEADER_DTYPE`; no unit is rebuilt.

Either may name a queue (``queue_id``: a 4.x batch's header does); else the broker spreads
the messages over the topic's queues. The answer, :class:`Sent`, holds each message's
queue offset and queue id (a repeat's: its original's, ``broker/dedup.py``).

>>> batch = PlainBatch("t", [b"hi"], [b"UNIQ_KEY\\x01ID1\\x02"], body_crcs=[0], tags_codes=[0],
...                    born_ms=[7], born_host=("10.0.0.1", 5), index_keys=[["ID1"]],
...                    max_body_bytes=64, max_properties_bytes=64)
>>> columns = to_store_batch(batch)
>>> len(batch), batch.body_bytes(), columns.topics, columns.queue_ids.tolist()
(1, 2, ['t'], [-1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_core.store.columns import ColumnBatch, encode_columns


@dataclass(slots=True)
class PlainBatch:
    """Plain (NORMAL) messages of one topic, one entry per message in each list.

    ``properties`` come encoded and checked by the front end's converter; the limits are
    those it checked against (the broker checks them once more as it lays out the units:
    MessageTooLargeError, PropertiesTooLargeError)."""

    topic: str
    bodies: list[bytes]
    properties: list[bytes]
    body_crcs: list[int]
    tags_codes: list[int]
    born_ms: list[int]
    born_host: tuple[str, int]  # the same for every message of a request
    index_keys: list[list[str]]  # UNIQ_KEY then KEYS, per message
    max_body_bytes: int
    max_properties_bytes: int
    queue_id: int | None = None  # the queue every message goes to (None: the broker's pick)

    def __len__(self) -> int:
        return len(self.bodies)

    def body_bytes(self) -> int:
        """The bodies' bytes, all messages together."""
        return sum(map(len, self.bodies))


@dataclass(slots=True)
class UnitsBatch:
    """Finished plain units of one topic, back to back in ``units`` (unit ``i`` at
    ``starts[i]``), their headers once more in ``head`` (records of ``HEADER_DTYPE``,
    each ``unit_crc`` the unit's CRC with the append's open fields zero)."""

    topic: str
    head: np.ndarray
    units: bytearray
    starts: np.ndarray
    index_keys: list[list[str]]
    queue_id: int | None = None
    # the units' properties back to back when each is its id alone, all of one length
    # (``UNIQ_KEY 0x01 id 0x02`` each, as decoded); message trace reads the ids there
    id_text: str | None = None

    def __len__(self) -> int:
        return len(self.head)

    def body_bytes(self) -> int:
        """The bodies' bytes, all messages together."""
        return int(self.head["body_length"].sum())


Batch = PlainBatch | UnitsBatch


@dataclass(slots=True, frozen=True)
class Sent:
    """What a stored batch answers: each message's queue offset and queue id (int64)."""

    queue_offsets: np.ndarray
    queue_ids: np.ndarray


def to_store_batch(batch: Batch) -> ColumnBatch:
    """The store's batch of ``batch`` (queue ids -1: the broker's to choose)."""
    if isinstance(batch, UnitsBatch):
        head = batch.head
        columns = ColumnBatch(
            head,
            head.view(np.uint8).data,
            batch.units,
            batch.starts,
            [batch.topic] * len(head),
            batch.index_keys,
        )
        columns.id_text = batch.id_text
        return columns
    return encode_columns(
        batch.topic,
        batch.bodies,
        batch.properties,
        body_crcs=batch.body_crcs,
        tags_codes=batch.tags_codes,
        born_ms=batch.born_ms,
        born_host=batch.born_host,
        index_keys=batch.index_keys,
        max_body_bytes=batch.max_body_bytes,
        max_properties_bytes=batch.max_properties_bytes,
    )
