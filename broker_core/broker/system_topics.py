"""Names of the topics and groups the broker creates and uses for its own bookkeeping."""

from __future__ import annotations

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delay levels: queue id = level - 1
TIMER_TOPIC = "rmq_sys_wheel_timer"  # messages with an arbitrary delivery time
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # prepared (half) transactional messages
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # commit/rollback records of halves
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG"  # POP checkpoints and acks, replayed after restart
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # the broker's own progress over half messages
SCHEDULE_GROUP = "CID_RMQ_SYS_SCHEDULE"

SYSTEM_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, REVIVE_TOPIC)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(("rmq_sys_", "RMQ_SYS_"))
