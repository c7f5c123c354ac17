"""Half records named by their commitlog offset: what the ACL reads to learn whose
transaction a producer is ending.

A 4.x ``END_TRANSACTION`` carries no topic; it names the half message by its UNIQ_KEY
(``msgId``) and by the commitlog offset of one of its half records (``commitLogOffset``:
the original, or the copy a check-back re-put). The topic the ACL checks is the half's
``REAL_TOPIC``. The offset comes from the client, so :func:`half_at` trusts nothing at it:
outside the commitlog, not the start of a verified record, a record of another topic or
of another message id — all the same :class:`MessageNotFoundError`, the error an unknown
message id gets from ``TransactionService.end``. :func:`read_named` is the same careful
read for any message a client names by offset (``Broker.topic_at``).
"""

from __future__ import annotations

import struct

from broker_core.broker.system_topics import TRANS_HALF_TOPIC
from broker_core.errors import MessageNotFoundError, RocketMQError
from broker_core.message import PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY, StoredMessage
from broker_core.store.message_store import MessageStore

UNIT_OVERHEAD_BYTES = 4096  # a unit's fixed fields and topic: StoreConfig allows this much


def real_topic(half: StoredMessage) -> str:
    """The topic a half record is delivered to on commit ("" if it names none)."""
    return half.properties.get(PROPERTY_REAL_TOPIC, "")


def not_at(message_id: str, physical_offset: int) -> MessageNotFoundError:
    """The error for an offset that does not hold a half record of ``message_id``."""
    return MessageNotFoundError(
        f"no half message {message_id} at commitlog offset {physical_offset}"
    )


def read_named(store: MessageStore, physical_offset: int) -> StoredMessage | None:
    """The verified message starting at commitlog ``physical_offset``, or None (outside
    the log, not the start of a unit, bit rot). Reads at most one unit's largest size:
    a bogus offset may read a bogus size, and must not read a gigabyte."""
    commitlog = store.commitlog
    if not commitlog.min_offset <= physical_offset < commitlog.max_offset:
        return None
    limits = store.config
    max_unit_bytes = limits.max_body_bytes + limits.max_properties_bytes + UNIT_OVERHEAD_BYTES
    try:
        return store.read_message(physical_offset, max_size_bytes=max_unit_bytes)
    except (RocketMQError, struct.error, ValueError):
        return None


def half_at(store: MessageStore, physical_offset: int, message_id: str) -> StoredMessage:
    """The half record of ``message_id`` stored at commitlog ``physical_offset``.

    Raises MessageNotFoundError (:func:`not_at`) unless the offset is the start of a
    verified record of the half topic whose UNIQ_KEY is ``message_id``. Reads only
    (:func:`read_named`).
    """
    stored = read_named(store, physical_offset)
    if stored is None or stored.topic != TRANS_HALF_TOPIC:
        raise not_at(message_id, physical_offset)
    if stored.properties.get(PROPERTY_UNIQ_KEY) != message_id:
        raise not_at(message_id, physical_offset)
    return stored
