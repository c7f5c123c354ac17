"""Names of the topics and groups the broker creates and uses for its own bookkeeping, and
the rule for which of them a client may send to.

Only the broker writes its own topics: a message in ``SCHEDULE_TOPIC_XXXX``, the timer, the
transaction half/op or the POP revive log is read back by the service that owns it, which
expects the properties it wrote there (``REAL_TOPIC``/``REAL_QID`` …); a client's message
there has no destination and would be dropped after it was acknowledged. So a send by any
client to any of them (or to any ``rmq_sys_``/``RMQ_SYS_`` name, as RocketMQ reserves) is
refused before anything is stored. Retry and dead-letter topics are not refused: a 4.x
consumer's send-back writes ``%RETRY%group`` (its fallback even sends there directly, as
RocketMQ's broker allows), and a message there is delivered to the group. Nor is the trace
topic ``RMQ_SYS_TRACE_TOPIC``: the 4.x clients with message trace on send their trace data
there (RocketMQ allows it too), and nothing of the broker reads it back but the index.
"""

from __future__ import annotations

from broker_core.errors import InvalidTopicError
from broker_core.message import PROPERTY_REAL_TOPIC, StoredMessage
from broker_core.protocol.trace import TRACE_TOPIC

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delay levels: queue id = level - 1
TIMER_TOPIC = "rmq_sys_wheel_timer"  # messages with an arbitrary delivery time
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # prepared (half) transactional messages
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # commit/rollback records of halves
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG"  # POP checkpoints and acks, replayed after restart
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # the broker's own progress over half messages
SCHEDULE_GROUP = "CID_RMQ_SYS_SCHEDULE"

SYSTEM_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, REVIVE_TOPIC)
# RocketMQ's broker refuses sends to this one too (TopicValidator's not-allowed-send set).
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "RMQ_SYS_"))


def check_client_send(topic: str) -> None:
    """InvalidTopicError if a client may not send to ``topic`` (one of the broker's own
    topics, see the module docstring); every producer path (:class:`Sender`) asks first."""
    if topic == TRACE_TOPIC:
        return  # the clients' message trace
    if is_system_topic(topic) or topic == TRANS_CHECK_MAX_TIME_TOPIC:
        raise InvalidTopicError(
            f"topic {topic!r} is a system topic of the broker: clients may not send to it"
        )


def destination_topic(msg: StoredMessage) -> str:
    """The topic a stored message is for: a message the broker holds in one of its own
    topics (a delay level, a timer, a transaction's half) names it in ``REAL_TOPIC``; any
    other is for the topic it is stored in. What a query by topic matches (the store is
    handed this rule; it knows nothing of holding)."""
    return msg.properties.get(PROPERTY_REAL_TOPIC, msg.topic)
