"""SEND_BATCH_MESSAGE's fast lane: a batch of plain 4.x messages straight to columns.

A 4.x batch body already carries each message's properties in the store's own encoding
(:mod:`broker_core.protocol.property_codec`), so a batch of plain messages (no delay, no
transaction, no message group, flag 0, a UNIQ_KEY, properties in canonical form, sysFlag
0) becomes the broker's :class:`~broker_core.broker.batch.PlainBatch`, stored by
``Sending.send_batch`` without a ``Message`` object per message, all in the header's
queue as RocketMQ stores a batch. Anything unusual returns None and the batch takes the
general path (``send.handle_send``), which accepts it or names the problem: both lanes
store the same bytes (tested) and refuse the same batches.
"""

from __future__ import annotations

import zlib

from broker_core.broker.batch import PlainBatch
from broker_core.errors import InvalidTopicError
from broker_core.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    tag_hash,
)
from broker_core.protocol import unit
from broker_core.protocol.message_rules import MAX_PROPERTIES_FIELD_BYTES
from broker_core.protocol.property_codec import encode_text

# Properties that route a message elsewhere than its queue (delay, timer, transaction,
# FIFO group, retry bookkeeping): such a batch takes the general path.
_ROUTED = frozenset(
    {
        "DELAY",
        "__STARTDELIVERTIME",
        "TRAN_MSG",
        "__SHARDINGKEY",
        "TIMER_ID",
        "REAL_TOPIC",
        "RETRY_TOPIC",
        "__transactionId__",
        "PGROUP",
    }
)


def plain_columns(
    topic: str,
    records: list[tuple[int, bytes, dict[str, str]]],
    *,
    sys_flag: int,
    born_ms: int,
    born_host: tuple[str, int],
    max_body_bytes: int,
    max_properties_bytes: int,
    queue_id: int,
) -> PlainBatch | None:
    """The batch as columns, or None when any message needs the general path."""
    if sys_flag or not records or not _storable_topic(topic):
        return None
    bodies, properties, crcs, tags_codes, index_keys = [], [], [], [], []
    for flag, body, props in records:
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if flag or not uniq or not 0 < len(body) <= max_body_bytes or _ROUTED.intersection(props):
            return None
        encoded = encode_text(props).encode()
        if b"\x00" in encoded or len(encoded) > min(
            max_properties_bytes, MAX_PROPERTIES_FIELD_BYTES
        ):
            return None
        keys = [uniq]
        if props.get(PROPERTY_KEYS):
            keys.extend(k for k in props[PROPERTY_KEYS].split(KEY_SEPARATOR) if k)
        bodies.append(body)
        properties.append(encoded)
        crcs.append(zlib.crc32(body))
        tags_codes.append(tag_hash(props.get(PROPERTY_TAGS) or None))
        index_keys.append(keys)
    return PlainBatch(
        topic,
        bodies,
        properties,
        body_crcs=crcs,
        tags_codes=tags_codes,
        born_ms=[born_ms] * len(bodies),
        born_host=born_host,
        index_keys=index_keys,
        max_body_bytes=max_body_bytes,
        max_properties_bytes=max_properties_bytes,
        queue_id=queue_id,
    )


def _storable_topic(topic: str) -> bool:
    """Whether a unit can hold the topic (else the general path names the problem)."""
    try:
        unit.topic_head(topic)
    except InvalidTopicError:
        return False
    return True
