"""Finding and reading messages: by key, by id, by store time, and a queue's browse.

Searches by key and id are the admin service's QueryMessage; a search by time asks each
queue for the offsets stored at ``begin`` and ``end`` (QueryOffset TIMESTAMP) and pulls
that range, at most ``limit`` messages in all. Bodies are shown as JSON when they parse,
as text when they are UTF-8, else as hex.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from broker_core.client import ReceivedMessage, RocketMQClient
from broker_core.console.targets import Targets
from broker_core.console.views import CONSOLE_GROUP, _try
from broker_core.errors import RocketMQError

MAX_RESULTS: Final = 200
HEX_PREVIEW_BYTES: Final = 4096


def render_body(body: bytes) -> dict[str, Any]:
    """``{"format": "json"|"text"|"hex", "text": ..., "bytes": n}`` for showing a body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {"format": "hex", "text": body[:HEX_PREVIEW_BYTES].hex(" "), "bytes": len(body)}
    try:
        return {
            "format": "json",
            "text": json.dumps(json.loads(text), indent=2, ensure_ascii=False),
            "bytes": len(body),
        }
    except ValueError:
        return {"format": "text", "text": text, "bytes": len(body)}


def _from_query(found: dict[str, Any], broker: str) -> dict[str, Any]:
    body = (
        base64.b64decode(found["body"])
        if found["body_encoding"] == "base64"
        else (found["body"].encode("utf-8"))
    )
    row = {k: v for k, v in found.items() if k not in ("body", "body_encoding")}
    return dict(row, broker=broker, body=render_body(body), body_base64=_b64(body))


def _b64(body: bytes) -> str:
    return base64.b64encode(body).decode("ascii")


def raw_body(row: dict[str, Any]) -> bytes:
    """The exact body bytes of a message row."""
    return base64.b64decode(row["body_base64"])


def _from_pull(msg: ReceivedMessage, broker: str) -> dict[str, Any]:
    return {
        "message_id": msg.message_id,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "tag": msg.tag,
        "keys": list(msg.keys),
        "properties": dict(msg.properties),
        "born_timestamp_ms": msg.born_timestamp_ms,
        "store_timestamp_ms": msg.store_timestamp_ms,
        "born_host": msg.born_host,
        "reconsume_times": max(0, msg.delivery_attempt - 1),
        "body_bytes": len(msg.body),
        "broker": broker,
        "body": render_body(msg.body),
        "body_base64": _b64(msg.body),
    }


def by_key(targets: Targets, topic: str, key: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for broker, client in targets.holding(topic).items():
        rows = client.query_message(key=key, topic=topic, max_results=MAX_RESULTS)
        found.extend(_from_query(r, broker) for r in rows)
    return found


def by_id(targets: Targets, message_id: str, topic: str | None) -> list[dict[str, Any]]:
    """The message (MessageNotFoundError from the last broker group when none has it)."""
    clients = targets.holding(topic) if topic else targets.brokers()
    error: RocketMQError | None = None
    for broker, client in clients.items():
        try:
            rows = client.query_message(message_id=message_id, topic=topic)
        except RocketMQError as exc:  # not on this broker group; the next may have it
            error = exc
            continue
        return [_from_query(r, broker) for r in rows]
    assert error is not None  # clients is never empty: holding/brokers raise instead
    raise error


def pull_range(
    client: RocketMQClient, broker: str, topic: str, queue_id: int, start: int, end: int
) -> list[dict[str, Any]]:
    """The messages of one queue in offsets ``[start, end)``."""
    found: list[dict[str, Any]] = []
    offset = start
    while offset < end:
        batch = client.pull(CONSOLE_GROUP, topic, queue_id, offset, min(32, end - offset))
        found.extend(_from_pull(m, broker) for m in batch.messages)
        if batch.next_offset <= offset:
            break
        offset = batch.next_offset
    return found


def by_time(
    targets: Targets, topic: str, begin_ms: int, end_ms: int, limit: int = MAX_RESULTS
) -> list[dict[str, Any]]:
    """Messages stored in ``[begin_ms, end_ms)`` across the topic's queues (oldest
    first, at most ``limit``)."""
    found: list[dict[str, Any]] = []
    for broker, client in targets.holding(topic).items():
        for q in client.topic_status(topic):
            qid = q["queue_id"]
            start = client.query_offset(topic, qid, "TIMESTAMP", timestamp_ms=begin_ms)
            stop = client.query_offset(topic, qid, "TIMESTAMP", timestamp_ms=end_ms)
            stop = min(stop, start + limit)
            found.extend(
                m
                for m in pull_range(client, broker, topic, qid, start, stop)
                if begin_ms <= m["store_timestamp_ms"] < end_ms
            )
    found.sort(key=lambda m: m["store_timestamp_ms"])
    return found[:limit]


def browse(targets: Targets, topic: str, limit: int = 50) -> list[dict[str, Any]]:
    """The oldest ``limit`` messages of every queue of ``topic`` (dead letters)."""
    found: list[dict[str, Any]] = []
    for broker, client in targets.holding(topic).items():
        for q in client.topic_status(topic):
            stop = min(q["max_offset"], q["min_offset"] + limit)
            found.extend(pull_range(client, broker, topic, q["queue_id"], q["min_offset"], stop))
    return found[:limit]


def trace(client: RocketMQClient, message_id: str, topic: str) -> dict[str, Any]:
    """The message's trace events when the client offers a trace query, else none."""
    query = getattr(client, "query_trace", None)
    if query is None:
        return {"events": [], "error": None}
    events, error = _try(query, message_id=message_id, topic=topic)
    return {"events": list(events or []), "error": error}
