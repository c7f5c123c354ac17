"""Admin verbs on consumer groups: ``CreateGroup``, ``ListGroups``, ``GroupProgress``,
``ResetOffset`` and ``DeleteGroup``.

Request fields and results are listed in ``server/admin.py``; the rules of a change
(what needs ``update``) are the broker's (``broker/group_admin.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from broker_core.broker.group_admin import check_group_change
from broker_core.broker.group_admin import delete_group as forget_group
from broker_core.broker.groups import GroupConfig
from broker_core.broker.retry import RetryPolicy, backoff_from_dict
from broker_core.errors import GroupNotFoundError, InvalidArgumentError
from broker_core.protocol.durations import parse_backoff
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Json, Verb


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
    return {**config.to_dict(), "created": existing is None, "changed": changed}


def list_groups(ctx: ServerContext, args: Args) -> list[Json]:
    return [c.to_dict() for c in ctx.broker.groups.list()]


def group_progress(ctx: ServerContext, args: Args) -> Json:
    name = args.text("name", required=True)
    topic = args.text("topic")
    if ctx.broker.groups.get(name) is None:
        raise GroupNotFoundError(f"consumer group {name!r} does not exist")
    if topic is not None:
        ctx.broker.topics.require(topic)
    rows = [
        {"topic": t, "queue_id": q, "broker_offset": high, "consumer_offset": offset, "lag": lag}
        for t, q, high, offset, lag in ctx.broker.consumer_groups.group_progress(name)
        if topic is None or t == topic
    ]
    inflight = sum(unacked for _, _, unacked in ctx.broker.pop.progress_of(name).values())
    return {
        "group": name,
        "queues": rows,
        "total_lag": sum(r["lag"] for r in rows),
        "inflight": inflight,
        "clients": ctx.broker.clients.consumers(name),  # online (gRPC and 4.x alike)
    }


def reset_offset(ctx: ServerContext, args: Args) -> list[Json]:
    group, topic = args.text("group", required=True), args.text("topic", required=True)
    to = args.data.get("to")
    if to not in ("earliest", "latest") and (
        isinstance(to, bool) or not isinstance(to, int) or to < 0
    ):
        raise InvalidArgumentError(
            f"ResetOffset: 'to' must be 'earliest', 'latest' or a timestamp in ms, got {to!r}"
        )
    offsets = ctx.broker.consumer_groups.reset_offsets(group, topic, to)
    return [{"queue_id": q, "offset": o} for q, o in sorted(offsets.items())]


_CREATE_FIELDS: Final = frozenset(
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
)


def delete_group(ctx: ServerContext, args: Args) -> Json:
    """Forget a group's config and committed offsets (the broker's own groups refused)."""
    name = args.text("name", required=True)
    forget_group(ctx.broker.groups, ctx.broker.offsets, name)
    return {"deleted": name}


def resend_message(ctx: ServerContext, args: Args) -> Json:
    """A copy of one stored message for one group (``Consuming.resend``)."""
    result = ctx.broker.consuming.resend(
        args.text("message_id", required=True),
        args.text("topic", required=True),
        args.text("group", required=True),
    )
    return {"message_id": result.message_id, "topic": result.topic, "offset": result.queue_offset}


VERBS: Final = {
    "CreateGroup": Verb(create_group, _CREATE_FIELDS, change=True),
    "ListGroups": Verb(list_groups, frozenset()),
    "GroupProgress": Verb(group_progress, frozenset({"name", "topic"})),
    "ResetOffset": Verb(reset_offset, frozenset({"group", "topic", "to"}), change=True),
    "DeleteGroup": Verb(delete_group, frozenset({"name"}), change=True),
    "ResendMessage": Verb(resend_message, frozenset({"message_id", "topic", "group"}), change=True),
}
