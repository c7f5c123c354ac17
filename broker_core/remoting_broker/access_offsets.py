"""Needs of the 4.x requests that name a message by commitlog offset instead of a topic.

``access.py`` asks these when auth is on. The header names no topic (END_TRANSACTION) or
names one the broker does not use (CONSUMER_SEND_MSG_BACK reads the message at
``offset``, whatever its ``originTopic`` says), so the topic the ACL checks is read at the
offset, through the broker (:class:`MessageLookup`, which ``Broker`` is):

======================  ===================================================================
END_TRANSACTION 37      Pub on the ``REAL_TOPIC`` of the half record at ``commitLogOffset``,
                        whose UNIQ_KEY must be ``msgId`` (``Broker.half_topic``)
CONSUMER_SEND_MSG_BACK  Sub on the group, and Sub on the topic of the message at ``offset``
36                      (``Broker.topic_at``; a ``%RETRY%g`` message: Sub on Group:g), so a
                        group's retry topic cannot be used to copy another topic's messages
======================  ===================================================================

A missing or non-numeric offset is InvalidArgumentError; an offset that holds no such
message is MessageNotFoundError — answered as the handler's own errors are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from broker_core.auth.acl import Action
from broker_core.auth.resources import Need
from broker_core.errors import InvalidArgumentError, MessageNotFoundError
from broker_core.protocol.group_topics import RETRY_PREFIX
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand

SUB: Final = (Action.SUB,)


class MessageLookup(Protocol):
    """What the checks read through (``Broker`` has both)."""

    def half_topic(self, physical_offset: int, message_id: str) -> str: ...

    def topic_at(self, physical_offset: int) -> str: ...


def _offset(req: RemotingCommand, key: str) -> int:
    raw = req.ext_fields.get(key, "")
    if not raw.isdigit():
        raise InvalidArgumentError(
            f"request code {req.code} needs {key}, a commitlog offset (got {raw[:40]!r})"
        )
    return int(raw)


def end_transaction_needs(req: RemotingCommand, lookup: MessageLookup) -> list[Need]:
    """Pub on the real topic of the half message END_TRANSACTION ends."""
    offset = _offset(req, "commitLogOffset")
    message_id = req.ext_fields.get("msgId", "")
    if not message_id:
        raise MessageNotFoundError("END_TRANSACTION names no half message (msgId is empty)")
    return [("Topic", lookup.half_topic(offset, message_id), (Action.PUB,))]


def send_back_needs(req: RemotingCommand, lookup: MessageLookup) -> list[Need]:
    """Sub on the group and on what the message sent back was consumed from."""
    group: Need = ("Group", req.ext_fields.get("group", ""), SUB)
    topic = lookup.topic_at(_offset(req, "offset"))
    if topic.startswith(RETRY_PREFIX):
        return [group, ("Group", topic[len(RETRY_PREFIX) :], SUB)]
    return [group, ("Topic", topic, SUB)]


OFFSET_NEEDS: Final[dict[int, Callable[[RemotingCommand, MessageLookup], list[Need]]]] = {
    RequestCode.END_TRANSACTION: end_transaction_needs,
    RequestCode.CONSUMER_SEND_MSG_BACK: send_back_needs,
}
