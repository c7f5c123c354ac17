"""``rmq.admin.v1.Admin``: the broker's administration service, JSON over gRPC (wiring).

A service of our own next to ``MessagingService``, without protobuf codegen. Every
method is unary-unary; the request and the response are one UTF-8 JSON object each.
The request's bytes reach the handler unparsed, so malformed JSON is answered like any
other bad input instead of failing inside gRPC.

Every response has the same shape::

    {"status": {"code": <apache.rocketmq.v2.Code>, "message": "..."}, "result": ...}

``result`` is ``null`` when ``status.code`` is not OK (20000). Codes come from the same
table as the main service (``status.py``): an unknown topic is TOPIC_NOT_FOUND (40402),
unknown or malformed fields are BAD_REQUEST (40000), and so on. No exception escapes.

Methods and their request fields (``?`` = optional):

==============  ==========================================================================
Health          (none) → broker name, endpoint, commitlog min/max/flushed offsets,
                          put TPS, version, the store's disk use, replication, and
                          each background service's state ("ok" or its failure);
                          parked: {pulls: n, receives: {now: {group: n}, total:
                          {group: waits begun}}} (long polls waiting for messages)
CreateTopic     name, queues?, read_queues?, write_queues?, perm?, message_type?,
                attributes?, update?, force? → the topic + created, changed,
                hidden_messages, warnings (an existing topic keeps what is not given;
                other settings need update, fewer read queues update and force;
                system and retry topics are refused)
ListTopics      include_system? → topics
TopicStatus     name → per queue: queue_id, min_offset, max_offset
DeleteTopic     name → {"deleted": name} (also forgets its queues and offsets)
CreateGroup     name, max_retries?, retry_backoff? ("1s,5s" | "delay_level" | backoff
                object such as {"type": "exponential", ...}), fifo?, consume_from_where?,
                consume_timestamp_ms?, broadcast?, consume_enable?, rebalance_strategy?,
                update? → the group + created, changed (other settings of an existing
                group need update; the broker's CID_RMQ_SYS_* groups are refused)
ListGroups      (none) → groups
DeleteGroup     name → {"deleted": name} (forgets its config and committed offsets; the
                broker's CID_RMQ_SYS_* groups are refused)
GroupProgress   name, topic? → per queue: topic, queue_id, broker_offset,
                consumer_offset, lag; total_lag; inflight (POP deliveries not yet acked);
                clients (ids of the group's online consumers)
QueryMessage    id, topic? | key, topic, max_results? ; text_bodies? → messages (bodies
                base64, or UTF-8 text when asked and they decode; ``body_encoding`` says)
ResetOffset     group, topic, to ("earliest" | "latest" | timestamp ms) → per queue offsets
ResendMessage   message_id, topic, group → a copy for the group's consumers only, as a new
                message in its retry topic: message_id, topic, offset
LockQueues      group, client_id, topic, queue_ids → {"locked": ids held now}
UnlockQueues    group, client_id, topic, queue_ids → {"unlocked": ids released}
GetBrokerConfig (none) → {"config": every broker setting now, "live_keys": the keys
                UpdateBrokerConfig may change}
UpdateBrokerConfig key, value → {"key", "old", "new"} (only live keys, see
                ``broker/live_config.py``; others are refused, naming the live ones)
==============  ==========================================================================

The verbs live in ``handlers/`` by family (``admin_topics``, ``admin_groups``,
``admin_inspect``, ``admin_locks``, ``admin_config``); their arguments are parsed by
``json_args.Args``. This module is the wiring: the method table, the error wrapper and
the gRPC registration. User and ACL methods (CreateUser, DeleteUser, ListUsers,
CreateAcl, DeleteAcl, ListAcls, ``handlers/admin_auth.py``) manage the server's user
table (``ServerContext.auth``). The table is built once, here, and never changed.
Changes (``CHANGES``) leave an audit line.

Threads: handlers run on the gRPC thread pool; everything they call on ``Broker`` is
thread-safe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import grpc

from broker_core.auth import audit
from broker_core.errors import RocketMQError
from broker_core.protocol.status import ok, status_of
from broker_core.server.context import ServerContext
from broker_core.server.handlers import (
    admin_auth,
    admin_config,
    admin_groups,
    admin_inspect,
    admin_locks,
    admin_topics,
)
from broker_core.server.json_args import Args, Json, Verb, parse_request, status_json

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "rmq.admin.v1.Admin"

METHODS: Final[Mapping[str, Verb]] = MappingProxyType(
    {
        **admin_inspect.VERBS,
        **admin_topics.VERBS,
        **admin_groups.VERBS,
        **admin_locks.VERBS,
        **admin_config.VERBS,
        **admin_auth.VERBS,
    }
)

# Methods that change the broker's state: each call leaves an audit line.
CHANGES: Final = frozenset(name for name, verb in METHODS.items() if verb.change)


def call(ctx: ServerContext, method: str, raw: bytes, peer: str = "") -> Json:
    """Run one admin method on raw request bytes; never raises (errors become statuses).
    Changes (``CHANGES``) leave an audit line whatever their outcome."""
    verb = METHODS[method]
    data: Mapping[str, Any] = {}
    try:
        data = parse_request(method, raw)
        result = verb.function(ctx, Args(method, data, verb.fields))
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("admin %s refused: %s", method, exc)
        else:
            log.exception("admin %s failed", method)
        status = status_of(exc)
        if method in CHANGES:
            audit.record(method, data, f"refused {int(status.code)}: {status.message}", peer=peer)
        return {"status": status_json(status), "result": None}
    if method in CHANGES:
        audit.record(method, data, "ok", peer=peer)
    return {"status": status_json(ok()), "result": result}


def _encode(response: Json) -> bytes:
    return json.dumps(response, separators=(",", ":")).encode("utf-8")


def _bytes(raw: bytes) -> bytes:
    return raw


def _unary(ctx: ServerContext, method: str) -> grpc.RpcMethodHandler:
    def handle(request: bytes, context: grpc.ServicerContext) -> Json:
        return call(ctx, method, request, context.peer())

    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=_bytes, response_serializer=_encode
    )


def admin_handler(ctx: ServerContext) -> grpc.GenericRpcHandler:
    """The admin service for ``app.Plugins.services`` (``assembly.py``)."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, {name: _unary(ctx, name) for name in METHODS}
    )
