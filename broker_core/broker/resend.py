"""Resend one stored message to a consumer group: mqadmin's ``consumeMessageDirectly`` and
the dashboards' "resend", as a broker policy.

The copy goes to the group's retry topic, so that group's consumers — and only they —
receive it, at once (no delay), as a message of its original topic (``RETRY_TOPIC``; a
copy taken from a retry or dead-letter topic keeps the topic it was first produced to).
It is a deliberate re-send, so it gets a new message id (the broker's duplicate check
must not take it for a retry of the original) and ``ORIGIN_MESSAGE_ID`` names the
original. Its delivery attempts start again at 1. The original is not touched.
"""

from __future__ import annotations

from broker_core.broker.pop.policy import revive_copy
from broker_core.broker.retry import retry_topic
from broker_core.message import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
    new_message_id,
)


def resend_copy(original: StoredMessage, group: str) -> Message:
    """The message to store for a resend of ``original`` to ``group``."""
    copy = revive_copy(original, retry_topic(group), reconsume_times=0)
    copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] = original.message_id
    copy.properties[PROPERTY_UNIQ_KEY] = new_message_id()
    return copy
