"""Authentication and ACL on the remoting port: what each 4.x request code needs.

With ``[auth] enabled`` every request must carry a valid 4.x signature
(``auth/remoting_sign.py``) of a known user, and the user's rules must allow what the
request does, with the same rules and decision as on the gRPC port (``acl.decide``: Deny
wins; super users may do anything). A refusal is answered ``NO_PERMISSION`` (16, as
RocketMQ's ``AbortProcessException``) with the reason in ``remark``; nothing is done.
A request whose resources cannot be found out (an END_TRANSACTION naming no half message,
a send-back naming no message) gets what the handler would answer without auth:
``SYSTEM_ERROR`` (1) with the reason.

====================================================  =======================================
SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH 320  Pub on the topic (a ``%RETRY%g`` topic:
                                                      Sub on Group:g, as RocketMQ does)
PULL_MESSAGE 11, LITE_PULL_MESSAGE 361                Sub on the topic and on the group
QUERY/UPDATE_CONSUMER_OFFSET 14/15                    Sub or Get / Sub or Update, topic and group
GET_MAX/MIN_OFFSET 30/31, SEARCH_OFFSET_BY_TIME 29    Sub or Get on the topic
HEART_BEAT 34                                         Sub on every consumer group and every
                                                      topic it subscribes (producers: none)
UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38   Sub on the consumer group (if given)
CONSUMER_SEND_MSG_BACK 36                             Sub on the group and on the topic of
                                                      the message at ``offset``
                                                      (``access_offsets.py``)
LOCK/UNLOCK_BATCH_MQ 41/42                            Sub on the group and every queue's topic
END_TRANSACTION 37                                    Pub on the real topic of the half message
                                                      at ``commitLogOffset`` (whose UNIQ_KEY
                                                      must be ``msgId``; ``access_offsets.py``)
GET_BROKER_RUNTIME_INFO 28                            authentication only
UPDATE_AND_CREATE_TOPIC 17                            Create or Update on the topic
GET_ALL_TOPIC_CONFIG 21                               List on Topic:*
GET_TOPIC_CONFIG 351, QUERY_TOPIC_CONSUME_BY_WHO 300  Get on the topic
INVOKE_BROKER_TO_RESET_OFFSET 222                     Update on the group
CHECK_CLIENT_CONFIG 46                                authentication only (checks a filter)
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200               Create or Update on the group (body)
QUERY_MESSAGE 12, GET_TOPIC_STATS_INFO 202            Get on the topic
VIEW_MESSAGE_BY_ID 33                                 Get on Topic:*
GET_CONSUME_STATS 208, GET_CONSUMER_CONNECTION 203    Get on the group
any other code                                        super users only
====================================================  =======================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from broker_core.auth import audit
from broker_core.auth.acl import Action
from broker_core.auth.authority import Authority
from broker_core.auth.remoting_sign import verify
from broker_core.auth.resources import Need
from broker_core.errors import (
    AccessDeniedError,
    InvalidArgumentError,
    RocketMQError,
    UnauthorizedError,
)
from broker_core.namesrv.wire import loads
from broker_core.protocol.group_topics import RETRY_PREFIX
from broker_core.remoting.channel import Channel, RequestHandler
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.access_offsets import OFFSET_NEEDS, MessageLookup
from broker_core.remoting_broker.send import header_of

log = logging.getLogger(__name__)

A = Action
C = RequestCode
SUB: Final = (A.SUB,)
GET: Final = (A.GET,)


def _field(req: RemotingCommand, key: str) -> str:
    return req.ext_fields.get(key, "")


def _topic_group(req: RemotingCommand, actions: tuple[Action, ...]) -> list[Need]:
    return [
        ("Topic", _field(req, "topic"), actions),
        ("Group", _field(req, "consumerGroup"), actions),
    ]


def _send(req: RemotingCommand) -> list[Need]:
    topic = header_of(req).get("topic", "")
    if topic.startswith(RETRY_PREFIX):
        return [("Group", topic[len(RETRY_PREFIX) :], SUB)]
    return [("Topic", topic, (A.PUB,))]


def _body(req: RemotingCommand) -> dict[str, Any]:
    """The JSON body as the handler reads it ({} when it does not parse: refused there)."""
    try:
        data = loads(req.body, "request")
    except InvalidArgumentError:
        return {}
    return data if isinstance(data, dict) else {}


def _dicts(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _heartbeat(req: RemotingCommand) -> list[Need]:
    needs: list[Need] = []
    for consumer in _dicts(_body(req), "consumerDataSet"):
        needs.append(("Group", str(consumer.get("groupName") or ""), SUB))
        for sub in _dicts(consumer, "subscriptionDataSet"):
            topic = str(sub.get("topic") or "")
            if topic and not topic.startswith(RETRY_PREFIX):
                needs.append(("Topic", topic, SUB))
    return needs


def _lock(req: RemotingCommand) -> list[Need]:
    data = _body(req)
    topics = sorted({str(q.get("topic") or "") for q in _dicts(data, "mqSet")})
    needs: list[Need] = [("Group", str(data.get("consumerGroup") or ""), SUB)]
    return needs + [("Topic", t, SUB) for t in topics]


def _group_in_body(req: RemotingCommand) -> list[Need]:
    group = str(_body(req).get("groupName") or "")
    return [("Group", group, (A.CREATE, A.UPDATE))]


def _optional_group(req: RemotingCommand) -> list[Need]:
    group = _field(req, "consumerGroup")
    return [("Group", group, SUB)] if group else []


NEEDS: Final[dict[int, Callable[[RemotingCommand], list[Need]]]] = {
    C.SEND_MESSAGE: _send,
    C.SEND_MESSAGE_V2: _send,
    C.SEND_BATCH_MESSAGE: _send,
    C.PULL_MESSAGE: lambda r: _topic_group(r, SUB),
    C.LITE_PULL_MESSAGE: lambda r: _topic_group(r, SUB),
    C.QUERY_CONSUMER_OFFSET: lambda r: _topic_group(r, (A.SUB, A.GET)),
    C.UPDATE_CONSUMER_OFFSET: lambda r: _topic_group(r, (A.SUB, A.UPDATE)),
    C.GET_MAX_OFFSET: lambda r: [("Topic", _field(r, "topic"), (A.SUB, A.GET))],
    C.GET_MIN_OFFSET: lambda r: [("Topic", _field(r, "topic"), (A.SUB, A.GET))],
    C.SEARCH_OFFSET_BY_TIMESTAMP: lambda r: [("Topic", _field(r, "topic"), (A.SUB, A.GET))],
    C.HEART_BEAT: _heartbeat,
    C.UNREGISTER_CLIENT: _optional_group,
    C.GET_CONSUMER_LIST_BY_GROUP: _optional_group,
    C.LOCK_BATCH_MQ: _lock,
    C.UNLOCK_BATCH_MQ: _lock,
    C.GET_BROKER_RUNTIME_INFO: lambda r: [],
    C.UPDATE_AND_CREATE_TOPIC: lambda r: [("Topic", _field(r, "topic"), (A.CREATE, A.UPDATE))],
    C.GET_ALL_TOPIC_CONFIG: lambda r: [("Topic", "*", (A.LIST,))],
    C.GET_TOPIC_CONFIG: lambda r: [("Topic", _field(r, "topic"), GET)],
    C.QUERY_TOPIC_CONSUME_BY_WHO: lambda r: [("Topic", _field(r, "topic"), GET)],
    C.CHECK_CLIENT_CONFIG: lambda r: [],
    C.INVOKE_BROKER_TO_RESET_OFFSET: lambda r: [("Group", _field(r, "group"), (A.UPDATE,))],
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _group_in_body,
    C.QUERY_MESSAGE: lambda r: [("Topic", _field(r, "topic"), GET)],
    C.GET_TOPIC_STATS_INFO: lambda r: [("Topic", _field(r, "topic"), GET)],
    C.VIEW_MESSAGE_BY_ID: lambda r: [("Topic", "*", GET)],
    C.GET_CONSUME_STATS: lambda r: [("Group", _field(r, "consumerGroup"), GET)],
    C.GET_CONSUMER_CONNECTION_LIST: lambda r: [("Group", _field(r, "consumerGroup"), GET)],
}


def requirements(req: RemotingCommand, lookup: MessageLookup | None = None) -> list[Need] | None:
    """What ``req`` needs (see the module docstring); None: super users only (also the
    codes of ``access_offsets`` when no ``lookup`` is given)."""
    by_offset = OFFSET_NEEDS.get(req.code)
    if by_offset is not None:
        return None if lookup is None else by_offset(req, lookup)
    rule = NEEDS.get(req.code)
    return rule(req) if rule is not None else None


class RemotingGuard:
    """Checks a remoting request's signature and rights with ``authority`` (the one the
    gRPC port uses: same users, rules and decision); ``lookup`` (the ``Broker``) reads
    the topic of a message a request names by commitlog offset (``access_offsets``)."""

    def __init__(self, authority: Authority, lookup: MessageLookup | None = None) -> None:
        self.authority = authority
        self.lookup = lookup

    def check(self, req: RemotingCommand, peer_ip: str | None) -> str:
        """The access key of the signed, allowed request; UnauthorizedError or
        AccessDeniedError otherwise, or the RocketMQError that finding out what the
        request touches raised (``access_offsets``)."""
        store = self.authority.store
        access_key = verify(req.ext_fields, req.body, store.secret_of)
        user = store.user(access_key)
        if user is None:  # deleted between the two reads
            raise UnauthorizedError(f"unknown access key {access_key!r}")
        if user.superuser:
            return access_key
        needs = requirements(req, self.lookup)
        if needs is None:
            raise AccessDeniedError(
                f"request code {req.code} is for super users only; user {access_key!r} is not one"
            )
        self.authority.check_needs(user, needs, peer_ip, f"request code {req.code}")
        return access_key

    def wrap(self, handler: RequestHandler) -> RequestHandler:
        """``handler`` behind the check: a refused request is answered NO_PERMISSION, one
        whose resources are not found SYSTEM_ERROR (as the handler's own errors are)."""

        def guarded(channel: Channel, req: RemotingCommand) -> RemotingCommand | None:
            host = channel.peer.rpartition(":")[0].strip("[]")
            try:
                access_key = self.check(req, host or None)
            except (UnauthorizedError, AccessDeniedError) as exc:
                log.info("request code %d from %s refused: %s", req.code, channel.peer, exc)
                return req.response(ResponseCode.NO_PERMISSION, remark=str(exc))
            except RocketMQError as exc:
                log.info("request code %d from %s failed: %s", req.code, channel.peer, exc)
                return req.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
            audit.set_caller(access_key, channel.peer)
            return handler(channel, req)

        return guarded
