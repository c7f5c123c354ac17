"""Our messages → ``apache.rocketmq.v2.Message`` as consumers receive them, and time helpers.

:func:`to_pb_message` turns a :class:`~broker_core.message.StoredMessage` into the
protobuf message the official clients decode (``rocketmq/v5/model/message.py``):

- ``system_properties`` carry what RocketMQ keeps in system property keys — message id
  (the producer's ``UNIQ_KEY``, else the offset id), tag, keys, message group, born and
  store timestamps, born host (address) and store host (address:port), queue id and
  offset, delivery attempt, delivery timestamp, trace context, message type, and for POP
  deliveries the receipt handle and invisible duration; for a message read from a DLQ
  topic, where it came from.
- ``body_digest`` is MD5 as upper-case hex, as RocketMQ's proxy sends it: every official
  client recomputes it the same way and marks a mismatch corrupted. (CRC32 is not: the
  Python and Java clients compare hex digits, the Node.js client decimal ones, so a CRC32
  digest made every message "corrupted" for Node's push consumers.) The store verified
  the body's CRC when it read it; the MD5 covers the wire.
- ``body_encoding`` is always IDENTITY: the store keeps bodies as sent (a client decoding
  ENCODING_UNSPECIFIED raises, so it must be set).
- ``user_properties`` are our properties minus every system key (:data:`SYSTEM_KEYS`).

Pure functions, no I/O; safe from any thread.

>>> from broker_core.message import StoredMessage
>>> m = StoredMessage("orders", 1, 7, 0, b"hi", {"TAGS": "paid", "UNIQ_KEY": "01AB", "x": "1"},
...                   0, 0, 1_500, ("10.0.0.1", 0), 2_000, ("10.0.0.2", 8081), 0, 0,
...                   0xD8932AAC, 0)
>>> pb = to_pb_message(m)
>>> pb.system_properties.message_id, pb.system_properties.tag, dict(pb.user_properties)
('01AB', 'paid', {'x': '1'})
>>> pb.system_properties.body_digest.checksum, pb.system_properties.delivery_attempt
('49F68A5C8493EC2C0BF489821C21FC3B', 1)
"""

from __future__ import annotations

import hashlib
import time

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core.broker.lite import split_lmq
from broker_core.broker.pop.model import PoppedMessage
from broker_core.broker.retry import is_dlq_topic
from broker_core.message import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    StoredMessage,
)
from broker_core.protocol.properties import (
    PROPERTY_LITE_TOPIC,
    PROPERTY_PRIORITY,
    PROPERTY_TRACE_CONTEXT,
    SYSTEM_KEYS,
)
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK

# ---- time ---------------------------------------------------------------------------------


def timestamp_of_ms(epoch_ms: int) -> Timestamp:
    """A protobuf Timestamp for milliseconds since the epoch."""
    return Timestamp(seconds=epoch_ms // 1_000, nanos=(epoch_ms % 1_000) * 1_000_000)


def ms_of_timestamp(ts: Timestamp) -> int:
    """Milliseconds since the epoch of a protobuf Timestamp (sub-millisecond part dropped)."""
    return int(ts.seconds) * 1_000 + int(ts.nanos) // 1_000_000


def ms_of_duration(duration: Duration) -> int:
    """Milliseconds of a protobuf Duration; negative durations stay negative."""
    return int(duration.seconds) * 1_000 + int(duration.nanos) // 1_000_000


def duration_of_ms(duration_ms: int) -> Duration:
    """A protobuf Duration of ``duration_ms`` milliseconds (``duration_ms`` ≥ 0)."""
    return Duration(seconds=duration_ms // 1_000, nanos=(duration_ms % 1_000) * 1_000_000)


def now_timestamp() -> Timestamp:
    """The wall clock as a Timestamp (the ``delivery_timestamp`` closing a receive)."""
    return timestamp_of_ms(time.time_ns() // 1_000_000)


# ---- messages -----------------------------------------------------------------------------


def message_type_of(msg: StoredMessage) -> int:
    """RocketMQ 5 message type: TRANSACTION, DELAY, FIFO, PRIORITY, LITE or NORMAL (in that
    precedence)."""
    props = msg.properties
    committed = msg.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    if committed or props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return int(pb.MessageType.TRANSACTION)
    if props.get(PROPERTY_DELAY_LEVEL) or props.get(PROPERTY_DELIVER_TIME_MS):
        return int(pb.MessageType.DELAY)
    if props.get(PROPERTY_MESSAGE_GROUP):
        return int(pb.MessageType.FIFO)
    if props.get(PROPERTY_PRIORITY, "").isdigit():
        return int(pb.MessageType.PRIORITY)
    if props.get(PROPERTY_LITE_TOPIC):
        return int(pb.MessageType.LITE)
    return int(pb.MessageType.NORMAL)


def _md5_hex(body: bytes) -> str:
    return hashlib.md5(body).hexdigest().upper()


def _host_port(host: tuple[str, int]) -> str:
    ip, port = host
    return f"{ip}:{port}" if port > 0 else ip


def _deliver_at_ms(props: dict[str, str]) -> int | None:
    """The requested delivery time of a timed message, if it carries a well-formed one."""
    raw = props.get(PROPERTY_DELIVER_TIME_MS) or ""
    return int(raw) if raw.isdigit() else None


def system_properties(msg: StoredMessage) -> pb.SystemProperties:
    """Everything about ``msg`` that is not its body or user properties (no POP fields)."""
    props = msg.properties
    sp = pb.SystemProperties(
        message_id=msg.message_id,
        keys=msg.keys,
        body_digest=pb.Digest(type=pb.DigestType.MD5, checksum=_md5_hex(msg.body)),
        body_encoding=pb.Encoding.IDENTITY,
        message_type=message_type_of(msg),
        born_timestamp=timestamp_of_ms(msg.born_timestamp_ms),
        born_host=msg.born_host[0],  # the address only, as RocketMQ's proxy sends it
        store_timestamp=timestamp_of_ms(msg.store_timestamp_ms),
        store_host=_host_port(msg.store_host),
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        delivery_attempt=msg.reconsume_times + 1,
    )
    if msg.tag is not None:
        sp.tag = msg.tag
    if group := props.get(PROPERTY_MESSAGE_GROUP):
        sp.message_group = group
    if (priority := props.get(PROPERTY_PRIORITY, "")).isdigit():
        sp.priority = int(priority)
    if lite := props.get(PROPERTY_LITE_TOPIC):
        sp.lite_topic = lite
    if (deliver_ms := _deliver_at_ms(props)) is not None:
        sp.delivery_timestamp.CopyFrom(timestamp_of_ms(deliver_ms))
    if trace := props.get(PROPERTY_TRACE_CONTEXT):
        sp.trace_context = trace
    if is_dlq_topic(msg.topic) and props.get(PROPERTY_RETRY_TOPIC):
        sp.dead_letter_queue.CopyFrom(
            pb.DeadLetterQueue(
                topic=props[PROPERTY_RETRY_TOPIC],
                message_id=props.get(PROPERTY_ORIGIN_MESSAGE_ID, msg.message_id),
            )
        )
    return sp


def user_properties(msg: StoredMessage) -> dict[str, str]:
    """Our properties minus the system keys."""
    return {k: v for k, v in msg.properties.items() if k not in SYSTEM_KEYS}


def to_pb_message(msg: StoredMessage, *, topic: str | None = None) -> pb.Message:
    """The protobuf ``Message`` for ``msg`` (as an offset pull returns it).

    ``topic`` overrides the topic shown to the client (a retry copy shows its original
    topic, so the client acks against the topic it subscribed to); a lite topic's message
    shows its parent topic (and its lite topic in ``system_properties``).
    """
    shown = topic or msg.topic
    if (lite := split_lmq(shown)) is not None:
        shown = lite[0]
    return pb.Message(
        topic=pb.Resource(name=shown),
        user_properties=user_properties(msg),
        system_properties=system_properties(msg),
        body=msg.body,
    )


def popped_to_pb(popped: PoppedMessage, invisible_ms: int) -> pb.Message:
    """The protobuf ``Message`` for one POP delivery: receipt handle, attempt, invisible time.

    ``invisible_ms`` is how long this delivery stays invisible (what the receive asked for).
    """
    out = to_pb_message(popped.message, topic=popped.topic)
    sp = out.system_properties
    sp.receipt_handle = popped.receipt_handle
    sp.delivery_attempt = popped.delivery_attempt
    sp.invisible_duration.CopyFrom(duration_of_ms(invisible_ms))
    return out
