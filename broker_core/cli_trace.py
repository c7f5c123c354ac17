"""``rmq message trace MSG_ID``: one message's timeline from the trace topic.

The trace topic (``RMQ_SYS_TRACE_TOPIC``) holds the 4.x clients' trace records and the
broker's own (``trace_broker``); the clients' are indexed by the traced message id, the
broker's by the id's bucket and its pull runs by the queue places they cover, so a few
queries by key find them (``protocol.trace_lookup``). The records are merged and ordered by
``broker_core.protocol.trace_timeline``.
"""

from __future__ import annotations

from typing import Any

import click

from broker_core.cli_base import _client, _iso, _print_json, _table, endpoints_option, json_option
from broker_core.cli_messages import message
from broker_core.errors import InvalidArgumentError
from broker_core.protocol.group_topics import DLQ_PREFIX, RETRY_PREFIX
from broker_core.protocol.trace import TRACE_TOPIC, decode
from broker_core.protocol.trace_lookup import Found, Query, lookup
from broker_core.protocol.trace_timeline import timeline

MAX_TRACE_MESSAGES = 1_000


def trace_events(query: Query, msg_id: str, topic: str | None = None) -> list[dict[str, Any]]:
    """The timeline of ``msg_id``, its trace messages found by ``query``
    (``protocol.trace_lookup``); with ``topic``, only events of that topic, its retry and
    DLQ copies, and client events that name no topic."""
    events = timeline(msg_id, lookup(msg_id, query))
    if topic is not None:
        events = [e for e in events if _of_topic(e.get("topic", ""), topic)]
    return events


def _found(messages: list[dict[str, Any]]) -> list[Found]:
    """Trace messages as ``query_message`` returns them (text bodies), decoded."""
    out: list[Found] = []
    for msg in messages:
        if msg["body_encoding"] != "text":
            continue  # not a trace record: the trace format is text
        try:
            records = decode(msg["body"])
        except InvalidArgumentError:
            continue  # a malformed trace message hides nothing else
        out.append((msg["queue_offset"], records, msg["born_host"], msg["born_timestamp_ms"]))
    return out


def _of_topic(event_topic: str, topic: str) -> bool:
    return (
        not event_topic
        or event_topic == topic
        or event_topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
    )


def _row(e: dict[str, Any]) -> list[Any]:
    where = f"{e['queue_id']}@{e['offset']}" if "queue_id" in e else ""
    return [
        _iso(e["time_ms"]),
        f"+{e['since_prev_ms']}",
        e["type"],
        e["source"],
        e["host"],
        e.get("group", ""),
        e.get("client_id", ""),
        e.get("attempt", ""),
        where,
        e.get("cost_ms", ""),
        e.get("status", ""),
    ]


@message.command("trace")
@click.argument("msg_id")
@click.option("--topic", "topic_name", help="only events of this topic (and its retries)")
@click.option(
    "--trace-topic", default=TRACE_TOPIC, show_default=True, help="the topic traces are in"
)
@json_option
@endpoints_option
def message_trace(
    msg_id: str, topic_name: str | None, trace_topic: str, as_json: bool, endpoints: str
) -> None:
    """The timeline of MSG_ID: client and broker trace records, ordered by time."""
    with _client(endpoints) as client:

        def query(key: str) -> list[Found]:
            return _found(
                client.query_message(
                    key=key, topic=trace_topic, max_results=MAX_TRACE_MESSAGES, text_bodies=True
                )
            )

        events = trace_events(query, msg_id, topic_name)
    if as_json:
        return _print_json({"msg_id": msg_id, "events": events})
    if not events:
        raise click.ClickException(f"no trace records of message {msg_id} in {trace_topic}")
    columns = [
        "time",
        "since",
        "type",
        "by",
        "host",
        "group",
        "client",
        "attempt",
        "queue@offset",
        "cost ms",
        "status",
    ]
    _table(f"trace of {msg_id}", columns, [_row(e) for e in events])
