"""``rmq send``, ``rmq consume``, ``rmq message query`` and ``rmq offset reset``."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

import click

from broker_core.cli_base import (
    SEND_ATTEMPTS,
    SEND_RETRY_BACKOFF_S,
    _client,
    _iso,
    _print_json,
    _table,
    broker_client,
    cli,
    endpoints_option,
    json_option,
)
from broker_core.client import OutgoingMessage, ReceivedMessage, RocketMQClient, standard
from broker_core.errors import RocketMQError
from broker_core.protocol.durations import parse_duration_ms

PULL_BATCH = 32


# ---- messages -------------------------------------------------------------------------------


def _properties(pairs: Sequence[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--property")
        props[key] = value
    return props


@cli.command("send")
@click.argument("topic_name", metavar="TOPIC")
@click.argument("body", required=False)
@click.option(
    "--body-file",
    type=click.File("rb"),
    help="read the body (any bytes) from PATH, or stdin with '-', instead of BODY",
)
@click.option("--tag", help="the message's tag (consumers filter on it)")
@click.option("--keys", help="comma-separated keys (searchable with 'message query --key')")
@click.option("--property", "pairs", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--group", "message_group", help="message group (FIFO)")
@click.option("--delay", help="deliver later, e.g. 10s, 5m")
@endpoints_option
def send(
    topic_name: str,
    body: str | None,
    body_file: BinaryIO | None,
    tag: str | None,
    keys: str | None,
    pairs: Sequence[str],
    message_group: str | None,
    delay: str | None,
    endpoints: str,
) -> None:
    """Send one message to TOPIC with BODY (UTF-8 text) or --body-file PATH|- (bytes)."""
    if (body is None) == (body_file is None):
        raise click.UsageError("give exactly one of BODY and --body-file")
    data = body_file.read() if body_file is not None else (body or "").encode("utf-8")
    deliver_ms = time.time_ns() // 1_000_000 + parse_duration_ms(delay) if delay else None
    message = OutgoingMessage(
        data,
        tag,
        [k for k in (keys or "").split(",") if k],
        _properties(pairs),
        message_group,
        deliver_ms,
    )
    with broker_client(
        endpoints, max_attempts=SEND_ATTEMPTS, retry_backoff_s=SEND_RETRY_BACKOFF_S
    ) as client:
        receipt = client.send_batch(topic_name, [message])[0]
        queue = _queue_of(client, receipt.message_id)
    click.echo(f"message id: {receipt.message_id}")
    click.echo(f"queue: {queue}")
    click.echo(f"offset: {receipt.offset}" + (" (in the timer queue)" if deliver_ms else ""))
    if receipt.recall_handle:
        click.echo(f"recall handle: {receipt.recall_handle}")
    if deliver_ms:
        click.echo(f"deliver at: {_iso(deliver_ms)}")


def _queue_of(client: RocketMQClient, message_id: str) -> str:
    """The queue a sent message went to (a send's receipt does not say); ``?`` if unknown."""
    try:
        found = client.query_message(message_id=message_id)
    except RocketMQError:
        return "?"
    props = found[0]["properties"]
    return str(props.get("REAL_QID", found[0]["queue_id"]))


def _start_offsets(
    client: RocketMQClient, group_name: str, topic_name: str, start: str | None
) -> dict[int, int]:
    """Where to read each queue: --from, else the group's committed offset (a group that
    never committed starts where its consume-from-where says: latest by default).

    The queues and their bounds come from QueryRoute and QueryOffset, not the admin
    TopicStatus: consuming needs Sub on the topic and the group, as in RocketMQ's ACL, and
    no Get."""
    offsets = {}
    for row in standard.topic_status(client, topic_name):
        qid = row["queue_id"]
        if start == "earliest":
            offsets[qid] = row["min_offset"]
        elif start == "latest":
            offsets[qid] = row["max_offset"]
        else:
            offsets[qid] = max(client.get_offset(group_name, topic_name, qid), row["min_offset"])
    return offsets


@cli.command("consume")
@click.argument("topic_name", metavar="TOPIC")
@click.option("--group", "group_name", required=True, help="consumer group")
@click.option(
    "--from",
    "start",
    type=click.Choice(["earliest", "latest"]),
    help="start here instead of the group's committed offsets",
)
@click.option("--max", "max_messages", type=click.IntRange(1), help="stop after N messages")
@click.option("--tag", "tag_expression", help="tag filter, e.g. 'TagA||TagB'")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per message")
@endpoints_option
def consume(
    topic_name: str,
    group_name: str,
    start: str | None,
    max_messages: int | None,
    tag_expression: str | None,
    as_json: bool,
    endpoints: str,
) -> None:
    """Print messages of TOPIC and commit the group's offsets; stops when caught up."""
    count, limit, committed = 0, max_messages or sys.maxsize, False
    with _client(endpoints) as client:
        offsets = _start_offsets(client, group_name, topic_name, start)
        active = sorted(offsets)
        while active and count < limit:
            for qid in list(active):
                batch = client.pull(
                    group_name,
                    topic_name,
                    qid,
                    offsets[qid],
                    min(PULL_BATCH, limit - count),
                    filter_expression=tag_expression,
                    with_bounds=False,
                )
                for msg in batch.messages:
                    if as_json:
                        click.echo(json.dumps(_message_dict(msg), sort_keys=True))
                        continue
                    tag = f" tag={msg.tag}" if msg.tag else ""
                    keys = f" keys={','.join(msg.keys)}" if msg.keys else ""
                    body = msg.body.decode("utf-8", errors="replace")
                    click.echo(f"[{qid}:{msg.queue_offset}] {msg.message_id}{tag}{keys} {body}")
                count += len(batch.messages)
                if batch.next_offset != offsets[qid]:
                    client.update_offset(group_name, topic_name, qid, batch.next_offset)
                    committed = True
                elif not batch.messages:
                    active.remove(qid)  # caught up
                offsets[qid] = batch.next_offset
                if count >= limit:
                    break
    done = f"offsets of {group_name} committed" if committed else "no offsets to commit"
    click.echo(f"consumed {count} message(s); {done}", err=True)


def _message_dict(msg: ReceivedMessage) -> dict[str, Any]:
    """A consumed message as JSON: the body as UTF-8 text, or base64 when it is not text."""
    try:
        body, encoding = msg.body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode("ascii"), "base64"
    return {
        "message_id": msg.message_id,
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "tag": msg.tag,
        "keys": list(msg.keys),
        "properties": dict(msg.properties),
        "body": body,
        "body_encoding": encoding,
        "store_timestamp_ms": msg.store_timestamp_ms,
    }


@cli.group()
def message() -> None:
    """Look messages up."""


@message.command("query")
@click.option("--id", "message_id", help="message id")
@click.option("--key", help="message key (needs --topic)")
@click.option("--topic", "topic_name", help="the topic to search (needed with --key)")
@click.option(
    "--max",
    "max_results",
    type=click.IntRange(1, 1000),
    default=32,
    show_default=True,
    help="most messages to show",
)
@json_option
@endpoints_option
def message_query(
    message_id: str | None,
    key: str | None,
    topic_name: str | None,
    max_results: int,
    as_json: bool,
    endpoints: str,
) -> None:
    """Find messages by --id, or by --key within --topic."""
    if (message_id is None) == (key is None):
        raise click.UsageError("give exactly one of --id and --key")
    if key is not None and topic_name is None:
        raise click.UsageError("--key needs --topic")
    with _client(endpoints) as client:
        found = client.query_message(
            message_id=message_id,
            key=key,
            topic=topic_name,
            max_results=max_results,
            text_bodies=True,
        )
    if as_json:
        return _print_json(found)
    if not found:
        click.echo(f"no message with key {key!r} in {topic_name}")
    for msg in found:
        body = msg["body"] if msg["body_encoding"] == "text" else f"(base64) {msg['body']}"
        _table(
            f"message {msg['message_id']}",
            ["field", "value"],
            [
                ("topic", msg["topic"]),
                ("queue", msg["queue_id"]),
                ("offset", msg["queue_offset"]),
                ("tag", msg["tag"] or ""),
                ("keys", ",".join(msg["keys"])),
                ("born", f"{_iso(msg['born_timestamp_ms'])} from {msg['born_host']}"),
                ("stored", f"{_iso(msg['store_timestamp_ms'])} at {msg['store_host']}"),
                ("reconsume times", msg["reconsume_times"]),
                ("properties", ", ".join(f"{k}={v}" for k, v in sorted(msg["properties"].items()))),
                ("body", f"{body} ({msg['body_bytes']} bytes)"),
            ],
        )


# The group a one-message read pulls as (mqadmin's queryMsgByOffset reads as TOOLS_CONSUMER
# too); it commits nothing.
TOOLS_GROUP = "TOOLS_CONSUMER"


@message.command("get")
@click.option("--topic", "topic_name", required=True, help="the message's topic")
@click.option("--queue", "queue_id", type=click.IntRange(0), required=True, help="queue id")
@click.option("--offset", type=click.IntRange(0), required=True, help="offset in the queue")
@json_option
@endpoints_option
def message_get(topic_name: str, queue_id: int, offset: int, as_json: bool, endpoints: str) -> None:
    """The message at --offset of --queue of --topic (mqadmin queryMsgByOffset)."""
    with _client(endpoints) as client:
        batch = client.pull(TOOLS_GROUP, topic_name, queue_id, offset, 1)
    if not batch.messages:
        raise click.ClickException(
            f"no message at offset {offset} of {topic_name} queue {queue_id} "
            f"(it holds offsets {batch.min_offset}..{batch.max_offset - 1})"
        )
    found = _message_dict(batch.messages[0])
    if as_json:
        return _print_json(found)
    _table(
        f"message {found['message_id']}",
        ["field", "value"],
        [
            ("topic", found["topic"]),
            ("queue", found["queue_id"]),
            ("offset", found["queue_offset"]),
            ("tag", found["tag"] or ""),
            ("keys", ",".join(found["keys"])),
            ("stored", _iso(found["store_timestamp_ms"])),
            ("properties", ", ".join(f"{k}={v}" for k, v in sorted(found["properties"].items()))),
            ("body", f"{found['body']} ({found['body_encoding']})"),
        ],
    )


@message.command("resend")
@click.argument("message_id")
@click.option("--topic", "topic_name", required=True, help="the message's topic")
@click.option("--group", "group_name", required=True, help="the consumer group to deliver to")
@json_option
@endpoints_option
def message_resend(
    message_id: str, topic_name: str, group_name: str, as_json: bool, endpoints: str
) -> None:
    """Deliver a copy of MESSAGE_ID to --group's consumers only, as a new message
    (mqadmin consumeMessageDirectly; the original stays where it is)."""
    with _client(endpoints) as client:
        copy = client.resend_message(message_id, topic_name, group_name)
    if as_json:
        return _print_json(copy)
    click.echo(f"resent {message_id} to {group_name} as {copy['message_id']}")


# ---- offsets --------------------------------------------------------------------------------


@cli.group()
def offset() -> None:
    """Move consumer group offsets."""


@offset.command("reset")
@click.option("--group", "group_name", required=True, help="consumer group (must exist)")
@click.option("--topic", "topic_name", required=True, help="topic whose queues move")
@click.option("--to", "target", required=True, help="earliest | latest | ms | ISO-8601 time")
@json_option
@endpoints_option
def offset_reset(
    group_name: str, topic_name: str, target: str, as_json: bool, endpoints: str
) -> None:
    """Move GROUP's offsets in every queue of TOPIC."""
    with _client(endpoints) as client:
        offsets = client.reset_offset(group_name, topic_name, target)
    if as_json:
        return _print_json([{"queue_id": q, "offset": o} for q, o in sorted(offsets.items())])
    _table(
        f"{group_name} on {topic_name} reset to {target}",
        ["queue", "offset"],
        sorted(offsets.items()),
    )
