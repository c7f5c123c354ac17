"""What the dedup window reads from the commitlog: which units are sends that count, the
answer a send first got, and the units of the window at a rebuild (``dedup_window``).

Which sends count, and why: :mod:`.dedup`. A unit is read back only on a repeat (its
original's result) and at a rebuild (the header and tail, and the properties of units in
system topics alone); a corrupt region is stepped over, not fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from broker_core.broker.sending import SendResult
from broker_core.broker.system_topics import TIMER_TOPIC, TRANS_HALF_TOPIC, is_system_topic
from broker_core.errors import CorruptionError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
)
from broker_core.protocol import unit as layout
from broker_core.protocol.group_topics import is_dlq_topic, is_retry_topic
from broker_core.protocol.property_codec import mark, value_of
from broker_core.store import codec
from broker_core.store.commitlog import CommitLog

log = logging.getLogger(__name__)

_UNIQ_MARK = mark(PROPERTY_UNIQ_KEY)


def deduplicated(topic: str) -> bool:
    """Whether sends to ``topic`` are deduplicated (not retry, DLQ or system topics)."""
    return not (is_system_topic(topic) or is_retry_topic(topic) or is_dlq_topic(topic))


def send_key(stored: StoredMessage) -> tuple[str, str] | None:
    """(topic the producer named, message id) of the send that stored ``stored``; None
    when it is not a producer's send that counts (see :mod:`.dedup`)."""
    props = stored.properties
    uniq = props.get(PROPERTY_UNIQ_KEY)
    if not uniq:
        return None
    flag = stored.sys_flag & layout.SYSFLAG_TRANSACTION_MASK
    if flag == layout.SYSFLAG_TRANSACTION_COMMIT:
        return None  # a committed half's delivery: the half holds the key
    topic = stored.topic
    if is_system_topic(topic):
        if topic == TRANS_HALF_TOPIC and props.get(PROPERTY_CHECK_TIMES):
            return None  # a check-back's copy of a half
        topic = props.get(PROPERTY_REAL_TOPIC, "")
    return (topic, uniq) if topic and deduplicated(topic) else None


def original_result(stored: StoredMessage) -> SendResult:
    """The answer the producer got when ``stored`` was first sent."""
    props = stored.properties
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    if not is_system_topic(stored.topic) or not real_topic:
        return SendResult(
            stored.message_id,
            stored.topic,
            stored.queue_id,
            stored.queue_offset,
            physical_offset=stored.physical_offset,
        )
    half = stored.topic == TRANS_HALF_TOPIC
    return SendResult(
        stored.message_id,
        real_topic,
        int(props.get(PROPERTY_REAL_QUEUE_ID) or 0),
        stored.queue_offset,
        transaction_id=props.get(PROPERTY_TRANSACTION_ID, "") if half else "",
        recall_handle=stored.message_id if stored.topic == TIMER_TOPIC else "",
        half_offset=stored.physical_offset if half else -1,
        physical_offset=stored.physical_offset,
    )


def readable_units(commitlog: CommitLog, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """``commitlog.iter_units`` that steps over a corrupt region to the next segment
    instead of failing the broker's start: a damaged unit is refused when read (its id
    cannot repeat a send the client saw answered), and the rest of the window is kept."""
    offset = start
    while offset < end:
        progress = [offset]
        try:
            yield from commitlog.iter_units(offset, end, progress=progress)
            return
        except CorruptionError as exc:
            later = [s.base_offset for s in commitlog.segments() if s.base_offset > progress[0]]
            log.warning("dedup window: skipped the rest of a segment at %d: %s", progress[0], exc)
            offset = min(later, default=end)


def window_start(commitlog: CommitLog, since_ms: int) -> int:
    """The base of the newest segment whose first unit is older than ``since_ms`` (the
    window starts in it), else the log's start."""
    for seg in reversed(commitlog.segments()):
        written = seg.wrote_position >= layout.HEADER_SIZE
        if written and commitlog.read_store_timestamp(seg.base_offset) < since_ms:
            return seg.base_offset
    return commitlog.min_offset


def unit_send(buf: bytes, pos: int, since_ms: int) -> tuple[str, str, int] | None:
    """(topic the producer named, message id, store time) of the send that stored the unit
    at ``pos``, if it counts and was stored at or after ``since_ms``. Reads only the
    header and the tail; decodes the properties only of units in system topics (holds
    of sends, rare)."""
    head = layout.HEADER.unpack_from(buf, pos)
    store_ms = head[12]
    if store_ms < since_ms:
        return None
    p = pos + layout.HEADER_SIZE + head[18]
    topic = bytes(buf[p + 1 : p + 1 + buf[p]]).decode()
    p += 1 + buf[p]
    props = bytes(buf[p + 2 : p + 2 + layout.PROPS_LEN.unpack_from(buf, p)[0]])
    if is_system_topic(topic) or head[8] & layout.SYSFLAG_TRANSACTION_MASK:
        found = send_key(codec.decode(buf, pos))
        return None if found is None else (*found, store_ms)
    if not deduplicated(topic):
        return None
    uniq = value_of(props, _UNIQ_MARK)
    return (topic, uniq, store_ms) if uniq else None
