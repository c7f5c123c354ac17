"""What an administrator may do to a topic: the checks behind ``CreateTopic``.

Creating a topic that exists is harmless only when the settings are the same; anything
else changes a live topic, so it needs an explicit ``update``. Lowering the read queue
count hides the upper queues from consumers (their messages stay in the store and come
back if the count grows again), so it also needs ``force`` and the answer warns how many
messages it hid. Write-only shrinks need just ``update``: they are how a topic is drained
safely before its read count follows.

Names the broker owns are refused, as delete refuses them:

* system topics (``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_*``/``RMQ_SYS_*``: timers, the
  transaction half and op topics, the POP revive log) — never created or changed;
* retry topics (``%RETRY%group``) — the broker creates them with the group's first
  receive; their shape is its business;
* dead-letter topics (``%DLQ%group``) — the broker creates them on the first dead letter.
  Changing an existing one is allowed, as RocketMQ's ``updateTopic`` allows it (admins set
  ``perm 6`` on a write-only DLQ to drain it); creating one by hand is refused.

Everything here is pure: the caller supplies the current config and a per-queue message
count, and applies the resulting config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.broker.retry import is_dlq_topic, is_retry_topic
from broker_core.broker.system_topics import is_system_topic
from broker_core.broker.topics import TopicConfig
from broker_core.errors import ConflictError, InvalidTopicError


@dataclass(frozen=True)
class TopicChange:
    """The outcome of a create/update request: what was stored and what it implies."""

    config: TopicConfig
    created: bool
    changed: bool
    hidden_messages: int = 0
    warnings: list[str] = field(default_factory=list)


def check_user_may_change(name: str, exists: bool) -> None:
    """InvalidTopicError if users may not create (``exists`` False) or change ``name``."""
    if is_system_topic(name):
        raise InvalidTopicError(f"{name!r} is a system topic and cannot be created or changed")
    if is_retry_topic(name):
        raise InvalidTopicError(
            f"{name!r} is a retry topic; the broker creates and sizes it "
            f"for its group, it cannot be created or changed"
        )
    if is_dlq_topic(name) and not exists:
        raise InvalidTopicError(
            f"{name!r} is a dead-letter topic; the broker creates it "
            f"on its group's first dead letter (it can be changed after)"
        )


def _differences(old: TopicConfig, new: TopicConfig) -> list[str]:
    before, after = old.to_dict(), new.to_dict()
    return [f"{key} {before[key]} -> {after[key]}" for key in before if before[key] != after[key]]


def plan_change(
    old: TopicConfig | None,
    new: TopicConfig,
    *,
    update: bool,
    force: bool,
    messages_in_queue: Callable[[int], int],
) -> TopicChange:
    """Decide whether ``new`` may replace ``old`` (None: the topic does not exist).

    Raises InvalidTopicError for names users may not touch, and ConflictError for an
    existing topic with other settings without ``update``, or for fewer read queues
    without ``force``. ``messages_in_queue(queue_id)`` counts a queue's stored messages.
    """
    check_user_may_change(new.name, old is not None)
    if old is None:
        return TopicChange(new, created=True, changed=True)
    differences = _differences(old, new)
    if not differences:
        return TopicChange(old, created=False, changed=False)
    if not update:
        raise ConflictError(
            f"topic {new.name!r} exists with other settings "
            f"({', '.join(differences)}); pass update (rmq topic create "
            f"--update) to change it"
        )
    if new.read_queue_nums >= old.read_queue_nums:
        return TopicChange(new, created=False, changed=True)
    hidden_ids = range(new.read_queue_nums, old.read_queue_nums)
    hidden = sum(messages_in_queue(q) for q in hidden_ids)
    what = (
        f"read queues {old.read_queue_nums} -> {new.read_queue_nums} hides queues "
        f"{hidden_ids[0]}..{hidden_ids[-1]} holding {hidden} message(s) from consumers "
        f"(they stay in the store and reappear if the count grows again)"
    )
    if not force:
        raise ConflictError(
            f"topic {new.name!r}: {what}; pass force (rmq topic create "
            f"--update --force) to shrink it anyway"
        )
    return TopicChange(
        new,
        created=False,
        changed=True,
        hidden_messages=hidden,
        warnings=[f"topic {new.name!r}: {what}"],
    )
