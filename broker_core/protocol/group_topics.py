"""A consumer group's retry and dead-letter topic names (``%RETRY%group``, ``%DLQ%group``).

Shared by the broker, which routes failed messages there, and by clients and Spark jobs,
which read them (``spark_jobs/dlq_replay``): RocketMQ's naming, nothing of ours.

>>> dlq_topic("billing"), is_retry_topic(retry_topic("billing"))
('%DLQ%billing', True)
"""

from __future__ import annotations

from broker_core.errors import InvalidArgumentError, InvalidTopicError

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def _check_group(group: str) -> str:
    """Return ``group`` if it is a non-empty string, else raise InvalidArgumentError."""
    if not isinstance(group, str) or not group:
        raise InvalidArgumentError(f"group must be a non-empty string, got {group!r}")
    return group


def retry_topic(group: str) -> str:
    """Return the retry topic of consumer ``group`` (``"%RETRY%" + group``)."""
    return RETRY_PREFIX + _check_group(group)


def dlq_topic(group: str) -> str:
    """Return the dead-letter topic of consumer ``group`` (``"%DLQ%" + group``)."""
    return DLQ_PREFIX + _check_group(group)


def is_retry_topic(topic: str) -> bool:
    """True if ``topic`` is ``"%RETRY%"`` followed by a non-empty group name."""
    return topic.startswith(RETRY_PREFIX) and len(topic) > len(RETRY_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    """True if ``topic`` is ``"%DLQ%"`` followed by a non-empty group name."""
    return topic.startswith(DLQ_PREFIX) and len(topic) > len(DLQ_PREFIX)


def group_of_retry_topic(topic: str) -> str:
    """Return the group a retry topic belongs to; InvalidTopicError if not a retry topic."""
    if not is_retry_topic(topic):
        raise InvalidTopicError(f"{topic!r} is not a retry topic ({RETRY_PREFIX}<group>)")
    return topic[len(RETRY_PREFIX) :]
