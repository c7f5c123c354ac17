"""The records transactions write: half records, their re-put copies, the committed message,
and op records.

* :func:`half_message` — ``msg`` as a half record in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0:
  invisible to consumers, its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID``, the
  producer group, transaction id and check base time in properties;
* :func:`recheck_message` — the copy a check-back re-puts (``TRANSACTION_CHECK_TIMES`` + 1,
  check base time reset to the check's time);
* :func:`real_message` — what a commit delivers: the half's body and user properties at
  its real destination, flagged committed;
* :func:`op_message` / :func:`parse_op_body` — the op record finishing a half record (tag
  ``d``, body the half's queue offset in ASCII decimal; RocketMQ 5 also joins several with
  commas).

Pure functions; safe from any thread. Bad input raises an ``InvalidArgumentError`` subclass.
"""

from __future__ import annotations

from broker_core.broker.system_topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, is_system_topic
from broker_core.errors import InvalidArgumentError, InvalidTopicError, InvalidTransactionIdError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
    new_message_id,
    validate_group_name,
    validate_topic_name,
)
from broker_core.protocol.properties import PROPERTY_CHECK_BASE_MS
from broker_core.protocol.unit import SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK

OP_TAG = "d"  # RocketMQ's REMOVE_TAG: the named half record is finished
HALF_QUEUE_ID = 0
OP_QUEUE_ID = 0


def half_message(msg: Message, producer_group: str, transaction_id: str, now_ms: int) -> Message:
    """The half record for ``msg``: invisible, with the real destination in properties."""
    validate_topic_name(msg.topic)
    if is_system_topic(msg.topic):
        raise InvalidTopicError(f"cannot send a transactional message to system topic {msg.topic}")
    validate_group_name(producer_group)
    if not transaction_id:
        raise InvalidTransactionIdError("transaction id is empty")
    if msg.queue_id < 0:
        raise InvalidArgumentError(f"queue id must be >= 0, got {msg.queue_id}")
    props = dict(msg.properties)
    props.pop(PROPERTY_CHECK_TIMES, None)
    props[PROPERTY_UNIQ_KEY] = props.get(PROPERTY_UNIQ_KEY) or new_message_id()
    props.update(
        {
            PROPERTY_REAL_TOPIC: msg.topic,
            PROPERTY_REAL_QUEUE_ID: str(msg.queue_id),
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_PRODUCER_GROUP: producer_group,
            PROPERTY_TRANSACTION_ID: transaction_id,
            PROPERTY_CHECK_BASE_MS: str(now_ms),
        }
    )
    return Message(
        TRANS_HALF_TOPIC,
        msg.body,
        HALF_QUEUE_ID,
        props,
        msg.flag,
        msg.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
        msg.born_timestamp_ms,
        msg.born_host,
        msg.reconsume_times,
    )


def real_message(half: StoredMessage) -> Message:
    """The committed message: the half's body and user properties, at its real destination."""
    props = dict(half.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, "")
    queue_id = props.pop(PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not queue_id.isdigit():
        raise InvalidArgumentError(f"half message {half.message_id} has no real topic/queue")
    for key in (PROPERTY_TRANSACTION_PREPARED, PROPERTY_CHECK_TIMES, PROPERTY_CHECK_BASE_MS):
        props.pop(key, None)
    sys_flag = (half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_COMMIT
    return Message(
        topic,
        half.body,
        int(queue_id),
        props,
        half.flag,
        sys_flag,
        half.born_timestamp_ms,
        half.born_host,
        half.reconsume_times,
        prepared_transaction_offset=half.physical_offset,
    )


def recheck_message(half: StoredMessage, now_ms: int) -> Message:
    """The copy of ``half`` a check re-puts: check times + 1, timeout counted from now."""
    props = dict(half.properties)
    props[PROPERTY_CHECK_TIMES] = str(int(props.get(PROPERTY_CHECK_TIMES) or 0) + 1)
    props[PROPERTY_CHECK_BASE_MS] = str(now_ms)
    return Message(
        half.topic,
        half.body,
        half.queue_id,
        props,
        half.flag,
        half.sys_flag,
        half.born_timestamp_ms,
        half.born_host,
        half.reconsume_times,
    )


def op_message(half_offset: int, now_ms: int) -> Message:
    """The op record finishing the half record at queue offset ``half_offset``."""
    if half_offset < 0:
        raise InvalidArgumentError(f"half offset must be >= 0, got {half_offset}")
    return Message(
        TRANS_OP_HALF_TOPIC,
        str(half_offset).encode(),
        OP_QUEUE_ID,
        {"TAGS": OP_TAG},
        born_timestamp_ms=now_ms,
    )


def parse_op_body(body: bytes) -> list[int]:
    """Half offsets named by an op record body (``b"17"`` or ``b"17,18"``).

    Raises InvalidArgumentError when the body is not comma-separated decimals >= 0.
    """
    try:
        parts = body.decode("ascii").split(",")
        offsets = [int(p) for p in parts if p.strip().isdigit()]
    except UnicodeDecodeError:
        offsets = []
        parts = ["?"]
    if not offsets or len(offsets) != len(parts):
        raise InvalidArgumentError(f"op record body {body[:40]!r} is not a list of offsets")
    return offsets
