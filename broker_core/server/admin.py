"""``rmq.admin.v1.Admin``: the broker's administration service, JSON over gRPC.

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
Health          (none) → broker name, endpoint, commitlog min/max/flushed offsets, and
                          each background service's state ("ok" or its failure)
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
GroupProgress   name, topic? → per queue: topic, queue_id, broker_offset,
                consumer_offset, lag
QueryMessage    id, topic? | key, topic, max_results? ; text_bodies? → messages (bodies
                base64, or UTF-8 text when asked and they decode; ``body_encoding`` says)
ResetOffset     group, topic, to ("earliest" | "latest" | timestamp ms) → per queue offsets
LockQueues      group, client_id, topic, queue_ids → {"locked": ids held now}
UnlockQueues    group, client_id, topic, queue_ids → {"unlocked": ids released}
==============  ==========================================================================

(The queue lock methods live in ``admin_locks.py``.)
User and ACL methods (CreateUser, DeleteUser, ListUsers, CreateAcl, DeleteAcl, ListAcls)
are registered by ``admin_auth.py``. Changes (``CHANGES``) leave an audit line.

Threads: handlers run on the gRPC thread pool; everything they call on ``Broker`` is
thread-safe.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import grpc

from broker_core.auth import audit
from broker_core.broker.group_admin import check_group_change
from broker_core.broker.groups import GroupConfig
from broker_core.broker.retry import RetryPolicy, backoff_from_dict
from broker_core.broker.system_topics import is_system_topic
from broker_core.broker.topics import TopicConfig
from broker_core.errors import (
    GroupNotFoundError,
    InvalidArgumentError,
    RocketMQError,
    TopicNotFoundError,
)
from broker_core.message import StoredMessage
from broker_core.protocol.durations import parse_backoff
from broker_core.protocol.status import ok, status_of
from broker_core.server import admin_locks
from broker_core.server.context import ServerContext

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "rmq.admin.v1.Admin"
MAX_QUERY_RESULTS: Final = 1_000

Json = dict[str, Any]
Method = Callable[[ServerContext, "Args"], Any]


class Args:
    """A request's fields, checked against what the method accepts.

    Construction raises InvalidArgumentError (BAD_REQUEST) for fields the method does
    not know; the getters raise it for a missing required field or a wrong type.
    """

    def __init__(self, method: str, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            accepted = ", ".join(sorted(allowed)) or "no fields"
            raise InvalidArgumentError(f"{method}: unknown field(s) {unknown}; accepts {accepted}")
        self.method = method
        self.data = dict(data)

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def _get(self, name: str, kinds: tuple[type, ...], what: str, required: bool) -> Any:
        value = self.data.get(name)
        if value is None:
            if required:
                raise InvalidArgumentError(f"{self.method}: field {name!r} is required")
            return None
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise InvalidArgumentError(f"{self.method}: {name!r} must be {what}, got {value!r}")
        return value

    def text(self, name: str, *, required: bool = False) -> Any:
        """The string field ``name`` (None when absent and not required)."""
        return self._get(name, (str,), "a string", required)

    def integer(self, name: str, *, required: bool = False, minimum: int | None = None) -> Any:
        """The integer field ``name`` (not a bool), at least ``minimum`` when given."""
        value = self._get(name, (int,), "an integer", required)
        if value is not None and minimum is not None and value < minimum:
            raise InvalidArgumentError(f"{self.method}: {name!r} must be >= {minimum}")
        return value

    def flag(self, name: str) -> Any:
        """The boolean field ``name`` (None when absent)."""
        return self._get(name, (bool,), "true or false", False)

    def obj(self, name: str) -> Any:
        """The JSON object field ``name`` (None when absent)."""
        return self._get(name, (dict,), "an object", False)


# ---- topics ---------------------------------------------------------------------------------


def _topic_json(config: TopicConfig) -> Json:
    return config.to_dict()


def create_topic(ctx: ServerContext, args: Args) -> Json:
    """Create a topic; changing an existing one needs ``update`` (and ``force`` to hide
    messages by lowering the read queue count). See ``broker/topic_admin.py``."""
    name = args.text("name", required=True)
    queues = args.integer("queues", minimum=1)
    old = ctx.broker.topics.get(name)
    base = (
        old.to_dict()
        if old
        else {
            "read_queue_nums": ctx.broker.topics.default_queue_nums,
            "write_queue_nums": ctx.broker.topics.default_queue_nums,
        }
    )
    values: Json = {**base, "name": name}
    if queues is not None:
        values["read_queue_nums"] = values["write_queue_nums"] = queues
    for field, key in (
        ("read_queues", "read_queue_nums"),
        ("write_queues", "write_queue_nums"),
        ("perm", "perm"),
    ):
        if args.has(field):
            values[key] = args.integer(field)
    if args.has("message_type"):
        values["message_type"] = args.text("message_type").upper()
    if args.has("attributes"):
        values["attributes"] = args.obj("attributes")
    change = ctx.broker.administer_topic(
        TopicConfig.from_dict(values),
        update=bool(args.flag("update")),
        force=bool(args.flag("force")),
    )
    return {
        **_topic_json(change.config),
        "created": change.created,
        "changed": change.changed,
        "hidden_messages": change.hidden_messages,
        "warnings": change.warnings,
    }


def list_topics(ctx: ServerContext, args: Args) -> list[Json]:
    include_system = bool(args.flag("include_system"))
    return [
        _topic_json(c)
        for c in ctx.broker.topics.list()
        if include_system or not is_system_topic(c.name)
    ]


def topic_status(ctx: ServerContext, args: Args) -> list[Json]:
    name = args.text("name", required=True)
    return [
        {"queue_id": q, "min_offset": low, "max_offset": high}
        for q, low, high in ctx.broker.topic_status(name)
    ]


def delete_topic(ctx: ServerContext, args: Args) -> Json:
    """Forget a topic: its config, queues and committed offsets (bytes age out with retention)."""
    name = args.text("name", required=True)
    broker = ctx.broker
    if not broker.topics.delete(name):
        raise TopicNotFoundError(f"topic {name!r} does not exist")
    broker.store.delete_topic(name)
    broker.offsets.remove_topic(name)
    return {"deleted": name}


# ---- groups ---------------------------------------------------------------------------------


def _retry_policy(args: Args, old: RetryPolicy) -> RetryPolicy:
    max_retries = args.integer("max_retries", minimum=0)
    if max_retries is None:
        max_retries = old.max_retries
    raw = args.data.get("retry_backoff")
    if raw is None:
        return RetryPolicy(max_retries, old.backoff)
    if isinstance(raw, dict):
        return RetryPolicy(max_retries, backoff_from_dict(raw))
    if raw == "delay_level":
        return RetryPolicy.default(max_retries)
    if isinstance(raw, str):
        return RetryPolicy.custom(parse_backoff(raw), max_retries)
    raise InvalidArgumentError(
        f"CreateGroup: 'retry_backoff' must be a list like '1s,5s', 'delay_level' or a backoff "
        f"object, got {raw!r}"
    )


def _group_json(config: GroupConfig) -> Json:
    return config.to_dict()


def create_group(ctx: ServerContext, args: Args) -> Json:
    """Create a consumer group; changing an existing one's settings needs ``update``."""
    name = args.text("name", required=True)
    old = ctx.broker.groups.get(name) or GroupConfig(name)
    changes: Json = {"retry_policy": _retry_policy(args, old.retry_policy)}
    for flag in ("fifo", "broadcast", "consume_enable"):
        if args.has(flag):
            changes[flag] = args.flag(flag)
    for text in ("consume_from_where", "rebalance_strategy"):
        if args.has(text):
            changes[text] = args.text(text)
    if args.has("consume_timestamp_ms"):
        changes["consume_timestamp_ms"] = args.integer("consume_timestamp_ms", minimum=0)
    existing = ctx.broker.groups.get(name)
    changes["auto_created"] = False  # configured now: POP honours its consume-from setting
    config = dataclasses.replace(old, **changes)
    changed = check_group_change(existing, config, update=bool(args.flag("update")))
    if changed:
        config = ctx.broker.configure_group(config)
    return {**_group_json(config), "created": existing is None, "changed": changed}


def list_groups(ctx: ServerContext, args: Args) -> list[Json]:
    return [_group_json(c) for c in ctx.broker.groups.list()]


def group_progress(ctx: ServerContext, args: Args) -> Json:
    name = args.text("name", required=True)
    topic = args.text("topic")
    if ctx.broker.groups.get(name) is None:
        raise GroupNotFoundError(f"consumer group {name!r} does not exist")
    if topic is not None:
        ctx.broker.topics.require(topic)
    rows = [
        {"topic": t, "queue_id": q, "broker_offset": high, "consumer_offset": offset, "lag": lag}
        for t, q, high, offset, lag in ctx.broker.group_progress(name)
        if topic is None or t == topic
    ]
    return {"group": name, "queues": rows, "total_lag": sum(r["lag"] for r in rows)}


# ---- messages and offsets -------------------------------------------------------------------


def _host(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _message_json(msg: StoredMessage, text_bodies: bool) -> Json:
    body: str | None = None
    encoding = "base64"
    if text_bodies:
        try:
            body, encoding = msg.body.decode("utf-8"), "text"
        except UnicodeDecodeError:
            body = None
    if body is None:
        body = base64.b64encode(msg.body).decode("ascii")
    return {
        "message_id": msg.message_id,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "physical_offset": msg.physical_offset,
        "tag": msg.tag,
        "keys": msg.keys,
        "properties": dict(msg.properties),
        "born_timestamp_ms": msg.born_timestamp_ms,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "born_host": _host(msg.born_host),
        "store_host": _host(msg.store_host),
        "reconsume_times": msg.reconsume_times,
        "body_bytes": len(msg.body),
        "body": body,
        "body_encoding": encoding,
    }


def query_message(ctx: ServerContext, args: Args) -> list[Json]:
    """By ``id`` (optionally within ``topic``) or by ``key`` within ``topic``."""
    message_id, key, topic = args.text("id"), args.text("key"), args.text("topic")
    text_bodies = bool(args.flag("text_bodies"))
    max_results = args.integer("max_results", minimum=1) or 64
    if (message_id is None) == (key is None):
        raise InvalidArgumentError("QueryMessage: give exactly one of 'id' and 'key'")
    if message_id is not None:
        found = [ctx.broker.query_by_id(message_id, topic)]
    else:
        if topic is None:
            raise InvalidArgumentError("QueryMessage: a query by 'key' needs 'topic'")
        ctx.broker.topics.require(topic)
        found = ctx.broker.query_by_key(topic, key, max_results=min(max_results, MAX_QUERY_RESULTS))
    return [_message_json(m, text_bodies) for m in found]


def reset_offset(ctx: ServerContext, args: Args) -> list[Json]:
    group, topic = args.text("group", required=True), args.text("topic", required=True)
    to = args.data.get("to")
    if to not in ("earliest", "latest") and (
        isinstance(to, bool) or not isinstance(to, int) or to < 0
    ):
        raise InvalidArgumentError(
            f"ResetOffset: 'to' must be 'earliest', 'latest' or a timestamp in ms, got {to!r}"
        )
    offsets = ctx.broker.reset_offsets(group, topic, to)
    return [{"queue_id": q, "offset": o} for q, o in sorted(offsets.items())]


def health(ctx: ServerContext, args: Args) -> Json:
    commitlog = ctx.broker.store.commitlog
    return {
        "broker_name": ctx.broker_name,
        "endpoint": ctx.endpoint,
        "commitlog_min_offset": commitlog.min_offset,
        "commitlog_max_offset": commitlog.max_offset,
        "commitlog_flushed_offset": commitlog.flushed_offset,
        "put_tps": ctx.broker.put_rate.per_second(),
        "services": ctx.broker.service_health(),
        "replication": ctx.broker.replication.status(),
    }


# ---- the service ----------------------------------------------------------------------------

METHODS: Final[dict[str, tuple[Method, frozenset[str]]]] = {
    "Health": (health, frozenset()),
    "CreateTopic": (
        create_topic,
        frozenset(
            {
                "name",
                "queues",
                "read_queues",
                "write_queues",
                "perm",
                "message_type",
                "attributes",
                "update",
                "force",
            }
        ),
    ),
    "ListTopics": (list_topics, frozenset({"include_system"})),
    "TopicStatus": (topic_status, frozenset({"name"})),
    "DeleteTopic": (delete_topic, frozenset({"name"})),
    "CreateGroup": (
        create_group,
        frozenset(
            {
                "name",
                "max_retries",
                "retry_backoff",
                "fifo",
                "consume_from_where",
                "consume_timestamp_ms",
                "broadcast",
                "consume_enable",
                "rebalance_strategy",
                "update",
            }
        ),
    ),
    "ListGroups": (list_groups, frozenset()),
    "GroupProgress": (group_progress, frozenset({"name", "topic"})),
    "QueryMessage": (
        query_message,
        frozenset({"id", "key", "topic", "max_results", "text_bodies"}),
    ),
    "ResetOffset": (reset_offset, frozenset({"group", "topic", "to"})),
    "LockQueues": (admin_locks.lock_queues, admin_locks.FIELDS),
    "UnlockQueues": (admin_locks.unlock_queues, admin_locks.FIELDS),
}


# Methods that change the broker's state: each call leaves an audit line.
CHANGES: Final = {"CreateTopic", "DeleteTopic", "CreateGroup", "ResetOffset"}


def register(name: str, method: Method, fields: frozenset[str], *, change: bool) -> None:
    """Add a method (before ``admin_handler`` is called); ``change``: audit its calls."""
    METHODS[name] = (method, fields)
    if change:
        CHANGES.add(name)


def parse_request(method: str, raw: bytes) -> Mapping[str, Any]:
    """Decode a request body: empty means ``{}``; anything but a JSON object is refused."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgumentError(f"{method}: request is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{method}: request must be a JSON object, got {data!r:.60}")
    return data


def call(ctx: ServerContext, method: str, raw: bytes, peer: str = "") -> Json:
    """Run one admin method on raw request bytes; never raises (errors become statuses).
    Changes (``audit.CHANGES``) leave an audit line whatever their outcome."""
    function, allowed = METHODS[method]
    data: Mapping[str, Any] = {}
    try:
        data = parse_request(method, raw)
        result = function(ctx, Args(method, data, allowed))
    except Exception as exc:
        if isinstance(exc, RocketMQError):
            log.info("admin %s refused: %s", method, exc)
        else:
            log.exception("admin %s failed", method)
        status = status_of(exc)
        if method in CHANGES:
            audit.record(method, data, f"refused {int(status.code)}: {status.message}", peer=peer)
        return {"status": {"code": int(status.code), "message": status.message}, "result": None}
    if method in CHANGES:
        audit.record(method, data, "ok", peer=peer)
    done = ok()
    return {"status": {"code": int(done.code), "message": done.message}, "result": result}


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
    """The admin service for ``BrokerServer.add_generic_handlers``."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, {name: _unary(ctx, name) for name in METHODS}
    )
