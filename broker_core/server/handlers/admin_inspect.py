"""Admin verbs that look into the broker: ``Health`` and ``QueryMessage``.

Request fields and results are listed in ``server/admin.py``. Neither changes anything.
"""

from __future__ import annotations

import base64
import importlib.metadata
import shutil
from typing import Final

from broker_core.errors import InvalidArgumentError
from broker_core.message import StoredMessage
from broker_core.server.context import ServerContext
from broker_core.server.json_args import Args, Json, Verb

MAX_QUERY_RESULTS: Final = 1_000


def _version() -> str | None:
    try:
        return importlib.metadata.version("rocketmq-spark")
    except importlib.metadata.PackageNotFoundError:  # a source tree never installed
        return None


_VERSION: Final = _version()


def health(ctx: ServerContext, args: Args) -> Json:
    low, high, flushed = ctx.broker.commitlog_offsets()
    return {
        "broker_name": ctx.broker_name,
        "endpoint": ctx.endpoint,
        "commitlog_min_offset": low,
        "commitlog_max_offset": high,
        "commitlog_flushed_offset": flushed,
        "put_tps": ctx.broker.put_rate.per_second(),
        "version": _VERSION,
        "disk": _disk(ctx.broker.store.config.store_dir),
        "services": ctx.broker.service_health(),
        "replication": ctx.broker.replication.status(),
        "parked": {
            "pulls": ctx.broker.long_polling.parked_count,
            "receives": ctx.broker.waiter.parked(),
        },
    }


def _disk(store_dir: str) -> Json | None:
    """The store's file system: total and used bytes (for the console's disk column)."""
    try:
        usage = shutil.disk_usage(store_dir)
    except OSError:
        return None
    return {"total_bytes": usage.total, "used_bytes": usage.used, "free_bytes": usage.free}


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
        if key is None or topic is None:  # key is given: exactly one of the two is
            raise InvalidArgumentError("QueryMessage: a query by 'key' needs 'topic'")
        ctx.broker.topics.require(topic)
        found = ctx.broker.query_by_key(topic, key, max_results=min(max_results, MAX_QUERY_RESULTS))
    return [_message_json(m, text_bodies) for m in found]


VERBS: Final = {
    "Health": Verb(health, frozenset()),
    "QueryMessage": Verb(
        query_message, frozenset({"id", "key", "topic", "max_results", "text_bodies"})
    ),
}
