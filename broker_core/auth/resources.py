"""What each RPC needs: the resources it touches and the actions that allow it.

:func:`requirements` maps (service, method, request) to a list of needs ``(kind, name,
actions)`` — the call is allowed when, for every need, the user may do one of its
actions on ``kind:name`` (``acl.decide``); ``None`` means *super users only* (user and
ACL administration, and any method not listed here, so a new admin verb is closed until
someone decides its rights). An empty list needs authentication only.

==========================================  ================================================
SendMessage, EndTransaction, RecallMessage  Pub on every topic of the request
ReceiveMessage, PullMessage, AckMessage,    Sub on the topic and Sub on the group
ChangeInvisibleDuration, Forward…DLQ,
QueryAssignment, Bulk/PullRaw (Sub), Bulk/SendBulk (Pub on the frame's topic)
UpdateOffset                                Sub or Update on the topic and on the group
GetOffset, QueryOffset                      Sub or Get on the topic (and group)
QueryRoute                                  Pub, Sub or Get on the topic
Heartbeat, NotifyClientTermination          Sub on the group when one is given
Telemetry, SyncLiteSubscription, Health     authentication only
CreateTopic / CreateGroup                   Create or Update on the topic / group
DeleteTopic / DeleteGroup                   Delete on the topic / group
TopicStatus, GroupProgress, QueryMessage    Get on the topic / group (QueryMessage by id
                                            alone: Get on Topic:*)
ListTopics / ListGroups                     List on Topic:* / Group:*
ResetOffset                                 Update on the group
GetBrokerConfig, UpdateBrokerConfig         super users only (not listed)
==========================================  ================================================

EndTransaction and RecallMessage name their message by id; the request's topic is what is
checked, so their handlers act only on a message of that topic (``held.py``: a half of
another topic is MESSAGE_NOT_FOUND).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from broker_core.auth.acl import Action
from broker_core.errors import RocketMQError
from broker_core.protocol import bulk_send

Need = tuple[str, str, tuple[Action, ...]]
A = Action
PUB: Final = (A.PUB,)
SUB: Final = (A.SUB,)

MESSAGING: Final = "apache.rocketmq.v2.MessagingService"
ADMIN: Final = "rmq.admin.v1.Admin"
BULK: Final = "rmq.bulk.v1.Bulk"


def _topic(name: str, actions: tuple[Action, ...]) -> Need:
    return ("Topic", name, actions)


def _group(name: str, actions: tuple[Action, ...]) -> Need:
    return ("Group", name, actions)


def _consume(topic: str, group: str, actions: tuple[Action, ...] = SUB) -> list[Need]:
    return [_topic(topic, actions), _group(group, actions)]


def _send(request: Any) -> list[Need]:
    return [_topic(t, PUB) for t in sorted({m.topic.name for m in request.messages})]


def _optional_group(request: Any) -> list[Need]:
    return [_group(request.group.name, SUB)] if request.group.name else []


_MESSAGING: Final[dict[str, Callable[[Any], list[Need]]]] = {
    "QueryRoute": lambda r: [_topic(r.topic.name, (A.PUB, A.SUB, A.GET))],
    "Heartbeat": _optional_group,
    "NotifyClientTermination": _optional_group,
    "SendMessage": _send,
    "EndTransaction": lambda r: [_topic(r.topic.name, PUB)],
    "RecallMessage": lambda r: [_topic(r.topic.name, PUB)],
    "QueryAssignment": lambda r: _consume(r.topic.name, r.group.name),
    "ReceiveMessage": lambda r: _consume(r.message_queue.topic.name, r.group.name),
    "PullMessage": lambda r: _consume(r.message_queue.topic.name, r.group.name),
    "AckMessage": lambda r: _consume(r.topic.name, r.group.name),
    "ChangeInvisibleDuration": lambda r: _consume(r.topic.name, r.group.name),
    "ForwardMessageToDeadLetterQueue": lambda r: _consume(r.topic.name, r.group.name),
    "UpdateOffset": lambda r: _consume(r.message_queue.topic.name, r.group.name, (A.SUB, A.UPDATE)),
    "GetOffset": lambda r: _consume(r.message_queue.topic.name, r.group.name, (A.SUB, A.GET)),
    "QueryOffset": lambda r: [_topic(r.message_queue.topic.name, (A.SUB, A.GET))],
    "Telemetry": lambda r: [],
    "SyncLiteSubscription": lambda r: [],
}


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _query_message(d: dict[str, Any]) -> list[Need]:
    return [_topic(_text(d, "topic") or "*", (A.GET,))]


_ADMIN: Final[dict[str, Callable[[dict[str, Any]], list[Need]]]] = {
    "Health": lambda d: [],
    "CreateTopic": lambda d: [_topic(_text(d, "name"), (A.CREATE, A.UPDATE))],
    "DeleteTopic": lambda d: [_topic(_text(d, "name"), (A.DELETE,))],
    "TopicStatus": lambda d: [_topic(_text(d, "name"), (A.GET,))],
    "ListTopics": lambda d: [_topic("*", (A.LIST,))],
    "CreateGroup": lambda d: [_group(_text(d, "name"), (A.CREATE, A.UPDATE))],
    "GroupProgress": lambda d: [_group(_text(d, "name"), (A.GET,))],
    "DeleteGroup": lambda d: [_group(_text(d, "name"), (A.DELETE,))],
    "ListGroups": lambda d: [_group("*", (A.LIST,))],
    "QueryMessage": _query_message,
    "ResetOffset": lambda d: [_group(_text(d, "group"), (A.UPDATE,))],
    # an orderly consumer locks the queues it consumes: what consuming needs, no more
    "LockQueues": lambda d: _consume(_text(d, "topic"), _text(d, "group")),
    "UnlockQueues": lambda d: _consume(_text(d, "topic"), _text(d, "group")),
}

_BULK: Final[dict[str, Callable[[dict[str, Any]], list[Need]]]] = {
    "PullRaw": lambda d: _consume(_text(d, "topic"), _text(d, "group")),
}


def _bulk_topic(raw: Any) -> str:
    """The topic of a SendBulk frame ("" when the frame does not parse: refused either way)."""
    try:
        return bulk_send.decode_request(bytes(raw)).topic
    except (RocketMQError, TypeError, ValueError):
        return ""


def _json(raw: Any) -> dict[str, Any]:
    """A JSON request's fields ({} when it does not parse: the handler refuses it)."""
    try:
        data = json.loads(raw) if raw and bytes(raw).strip() else {}
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def requirements(service: str, method: str, request: Any) -> list[Need] | None:
    """The needs of one call (see the module docstring); None: super users only."""
    if service == MESSAGING:
        rule = _MESSAGING.get(method)
        return rule(request) if rule is not None else None
    if service == BULK and method == "SendBulk":  # a binary frame, not JSON
        return [_topic(_bulk_topic(request), PUB)]
    table = _ADMIN if service == ADMIN else _BULK if service == BULK else None
    if table is None or method not in table:
        return None
    return table[method](_json(request))
