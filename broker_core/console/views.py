"""What the console's pages show, as plain JSON-able dicts: one function per page.

The ``/api/...`` routes return these dicts as they are and the HTML pages render the same
ones, so a page never shows what the API does not serve. Every call goes through the
user's client (:class:`~broker_core.console.targets.Targets`); a broker group that
refuses or cannot be reached is reported in its row (``error``), the others still show.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from broker_core.client import RocketMQClient
from broker_core.console.targets import Targets
from broker_core.errors import RocketMQError
from broker_core.protocol.group_topics import dlq_topic

T = TypeVar("T")
# The group the console's reads (a queue's last message, browsing, search by time) name:
# it commits nothing, and the broker's group auto-creation makes it on first use.
CONSOLE_GROUP = "rmq-console"


def _try(call: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T | None, str | None]:
    """``(call's result, None)``, or ``(None, the broker's refusal)``."""
    try:
        return call(*args, **kwargs), None
    except RocketMQError as exc:
        return None, " ".join(str(exc).split())


class ConsumeRates:
    """Get TPS per broker group: the rate of its consumer offsets' total between two
    looks (the console's own sampling; the broker reports put TPS itself)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def rate(self, broker: str, consumed_total: int) -> float | None:
        now = time.monotonic()
        with self._lock:
            before = self._last.get(broker)
            self._last[broker] = (now, consumed_total)
        if before is None or now <= before[0]:
            return None
        return max(0.0, (consumed_total - before[1]) / (now - before[0]))


def _consumed_total(client: RocketMQClient) -> int:
    total = 0
    for group in client.list_groups():
        progress, _ = _try(client.group_progress, group["name"])
        for row in (progress or {}).get("queues", []):
            total += int(row["consumer_offset"])
    return total


def _broker_row(name: str, client: RocketMQClient, rates: ConsumeRates) -> dict[str, Any]:
    health, error = _try(client.health)
    if health is None:
        return {"broker": name, "address": client.endpoint, "error": error}
    services = health.get("services", {})
    replication = health.get("replication", {})
    consumed, _ = _try(_consumed_total, client)
    return {
        "broker": name,
        "address": client.endpoint,
        "role": replication.get("role", "master"),
        "replication": replication,
        "version": health.get("version"),
        "disk": health.get("disk"),
        "log_bytes": health["commitlog_max_offset"] - health["commitlog_min_offset"],
        "put_tps": health.get("put_tps"),
        "get_tps": None if consumed is None else rates.rate(name, consumed),
        "services": services,
        "unhealthy": {k: v for k, v in services.items() if v not in ("ok", "stopped")},
        "error": None,
    }


def overview(targets: Targets, rates: ConsumeRates) -> dict[str, Any]:
    """``/`` and ``/api/overview``: one row per broker group."""
    brokers = [_broker_row(n, c, rates) for n, c in targets.brokers().items()]
    unhealthy = [b["broker"] for b in brokers if b["error"] or b["unhealthy"]]
    return {"time_ms": int(time.time() * 1000), "brokers": brokers, "unhealthy": unhealthy}


def topics(targets: Targets, include_system: bool = False) -> dict[str, Any]:
    """``/topics``: every topic with its type, queues, brokers and message count."""
    merged: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for broker, client in targets.brokers().items():
        listed, error = _try(client.list_topics, include_system=include_system)
        if listed is None:
            errors[broker] = error or ""
            continue
        for t in listed:
            row = merged.setdefault(
                t["name"],
                {"name": t["name"], "type": t["message_type"], "perm": t["perm"], "brokers": []},
            )
            status, _ = _try(client.topic_status, t["name"])
            row["brokers"].append(broker)
            row["read_queues"] = row.get("read_queues", 0) + t["read_queue_nums"]
            row["write_queues"] = row.get("write_queues", 0) + t["write_queue_nums"]
            row["messages"] = row.get("messages", 0) + sum(
                q["max_offset"] - q["min_offset"] for q in status or []
            )
    return {"topics": [merged[n] for n in sorted(merged)], "errors": errors}


def _last_store_ms(client: RocketMQClient, topic: str, queue: dict[str, Any]) -> int | None:
    if queue["max_offset"] <= queue["min_offset"]:
        return None
    batch, _ = _try(
        client.pull, CONSOLE_GROUP, topic, queue["queue_id"], queue["max_offset"] - 1, 1
    )
    if batch is None or not batch.messages:
        return None
    return batch.messages[0].store_timestamp_ms


def topic(targets: Targets, name: str) -> dict[str, Any]:
    """``/topics/{topic}``: config, per broker and queue min/max offset and last store
    time, and the route (TopicNotFoundError when no broker group holds it)."""
    queues: list[dict[str, Any]] = []
    config: dict[str, Any] | None = None
    for broker, client in targets.holding(name).items():
        if config is None:
            config = next((t for t in client.list_topics() if t["name"] == name), None)
        for q in client.topic_status(name):
            q = dict(q, broker=broker, messages=q["max_offset"] - q["min_offset"])
            q["last_store_ms"] = _last_store_ms(client, name, q)
            queues.append(q)
    route, route_error = _try(targets.client.query_route, name)
    return {
        "name": name,
        "config": config,
        "messages": sum(q["messages"] for q in queues),
        "queues": queues,
        "route": [
            {
                "broker": r.broker_name,
                "queue_id": r.queue_id,
                "endpoint": r.endpoint,
                "permission": r.permission,
            }
            for r in route or []
        ],
        "route_error": route_error,
    }


def groups(targets: Targets) -> dict[str, Any]:
    """``/groups``: every consumer group with its settings and total lag."""
    merged: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for broker, client in targets.brokers().items():
        listed, error = _try(client.list_groups)
        if listed is None:
            errors[broker] = error or ""
            continue
        for g in listed:
            if g["name"] == CONSOLE_GROUP:  # made by the console's own reads; consumes nothing
                continue
            row = merged.setdefault(g["name"], dict(g, brokers=[], total_lag=0))
            progress, _ = _try(client.group_progress, g["name"])
            row["brokers"].append(broker)
            row["total_lag"] += int((progress or {}).get("total_lag", 0))
    return {"groups": [merged[n] for n in sorted(merged)], "errors": errors}


def group(targets: Targets, name: str) -> dict[str, Any]:
    """``/groups/{group}``: settings, lag per topic and queue (GroupNotFoundError when no
    broker group knows it)."""
    config: dict[str, Any] | None = None
    queues: list[dict[str, Any]] = []
    clients: set[str] = set()
    for broker, client in targets.brokers().items():
        progress, _ = _try(client.group_progress, name)
        if progress is None:
            continue
        clients.update(progress.get("clients", ()))
        if config is None:
            config = next((g for g in client.list_groups() if g["name"] == name), None)
        queues.extend(dict(q, broker=broker) for q in progress["queues"])
    if config is None:
        targets.client.group_progress(name)  # raises the broker's own error
    by_topic: dict[str, int] = {}
    for q in queues:
        by_topic[q["topic"]] = by_topic.get(q["topic"], 0) + int(q["lag"])
    return {
        "name": name,
        "config": config,
        "queues": queues,
        "lag_by_topic": by_topic,
        "total_lag": sum(by_topic.values()),
        "clients": sorted(clients),  # online consumers, over every broker group
        "time_ms": int(time.time() * 1000),
    }


def dlq(targets: Targets) -> dict[str, Any]:
    """``/dlq``: every group's dead-letter topic with its message count."""
    brokers = targets.brokers()
    rows: list[dict[str, Any]] = []
    for g in groups(targets)["groups"]:
        topic_name = dlq_topic(g["name"])
        statuses = [_try(c.topic_status, topic_name)[0] for c in brokers.values()]
        found = [s for s in statuses if s is not None]
        count = sum(q["max_offset"] - q["min_offset"] for s in found for q in s)
        rows.append(
            {"group": g["name"], "topic": topic_name, "exists": bool(found), "messages": count}
        )
    return {"groups": rows}


def acl(client: RocketMQClient) -> dict[str, Any]:
    """``/acl``: users (never their secrets) and rules; the broker's refusal when this
    user may not list them (super users only)."""
    users, error = _try(client.list_users)
    rules, rules_error = _try(client.list_acls)
    return {
        "users": [{k: v for k, v in u.items() if k != "secret_key"} for u in users or []],
        "rules": rules or [],
        "error": error or rules_error,
    }
