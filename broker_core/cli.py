"""``rmq``: run a broker and administer it — mqadmin's everyday verbs.

``rmq broker start``, ``rmq topic create|list|status|delete``, ``rmq group
create|list|progress``, ``rmq send``, ``rmq consume``, ``rmq message query``, ``rmq offset
reset``. Example::

    rmq topic create orders --queues 4 --endpoints 127.0.0.1:8081
    rmq send orders 'hello' --tag TagA --keys k1,k2 --property region=eu --delay 10s
    rmq consume orders --group GID_cli --from earliest --max 10 --tag 'TagA||TagB'

Every command that talks to a broker takes ``--endpoints HOST:PORT`` (default
``127.0.0.1:8081``, or ``$RMQ_ENDPOINTS``). Expected failures (broker unreachable, unknown
topic, bad arguments) print one line ``Error: ...`` and exit with status 1; no traceback.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from broker_core.broker.retry import parse_duration_ms
from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.client.env import client_settings
from broker_core.errors import RocketMQError

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_ENDPOINTS = "127.0.0.1:8081"
PULL_BATCH = 32


class _Rmq(click.Group):
    """Turns our errors into one-line messages and every usage error into exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocketMQError as exc:
            raise click.ClickException(" ".join(str(exc).split())) from None
        except click.UsageError as exc:
            exc.exit_code = 1  # type: ignore[misc]  # "bad arguments" exit 1, as all errors
            raise


def endpoints_option(command: F) -> F:
    return click.option("--endpoints", envvar="RMQ_ENDPOINTS", default=DEFAULT_ENDPOINTS,
                        show_default=True, help="broker HOST:PORT")(command)  # fmt: skip


def _client(endpoints: str) -> RocketMQClient:
    """A client of ``endpoints``, signing with $RMQ_ACCESS_KEY/$RMQ_SECRET_KEY and using
    TLS per $RMQ_TLS/$RMQ_CA_FILE (``broker_core/client/env.py``)."""
    return RocketMQClient(endpoints, timeout_s=10.0, max_attempts=2, **client_settings())


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(highlight=False, soft_wrap=True).print(table)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


@click.group(cls=_Rmq)
def cli() -> None:
    """Run and administer a RocketMQ-style broker."""


# ---- broker ---------------------------------------------------------------------------------


@cli.group()
def broker() -> None:
    """Run a broker."""


@broker.command("start")
@click.option("--listen", default="127.0.0.1:8081", show_default=True, help="HOST:PORT (0 = any)")
@click.option("--store-dir", default=".rocketmq/store", show_default=True)
@click.option("--flush", type=click.Choice(["sync", "async"]), default=None)
@click.option("--config", "config_file", default=None, help="TOML file with [broker], [store]")
@click.option("--advertise", default=None, help="endpoint clients are given in routes")
@click.option("--metrics-listen", default=None, help="Prometheus /metrics on HOST:PORT")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", default="text", show_default=True,
              type=click.Choice(["text", "json"]))
def broker_start(listen: str, store_dir: str, flush: str | None, config_file: str | None,
                 advertise: str | None, metrics_listen: str | None, log_level: str,
                 log_format: str) -> None:  # fmt: skip
    """Start a broker in the foreground; prints READY HOST:PORT, stops on SIGTERM/Ctrl-C."""
    from broker_core.server.app import run  # grpc server machinery only when needed

    argv = ["--listen", listen, "--store-dir", store_dir, "--log-level", log_level,
            "--log-format", log_format]
    options = {"--flush": flush, "--config": config_file, "--advertise": advertise,
               "--metrics-listen": metrics_listen}
    argv += [text for flag, value in options.items() if value for text in (flag, value)]
    try:
        code = run(argv)
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "bind" not in str(exc):
            raise  # a crash, not a busy port: keep its traceback
        raise click.ClickException(f"cannot listen on {listen}: {exc}") from None
    raise SystemExit(code)


# ---- topics ---------------------------------------------------------------------------------


@cli.group()
def topic() -> None:
    """Create, list, inspect and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), help="read and write queue count")
@click.option("--read-queues", type=click.IntRange(1, 1024))
@click.option("--write-queues", type=click.IntRange(1, 1024))
@click.option("--perm", type=click.Choice(["2", "4", "6"]), help="2 write, 4 read, 6 both")
@click.option("--type", "message_type", help="NORMAL, FIFO, DELAY, TRANSACTION or MIXED",
              type=click.Choice(["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"],
                                case_sensitive=False))  # fmt: skip
@endpoints_option
def topic_create(name: str, queues: int | None, read_queues: int | None,
                 write_queues: int | None, perm: str | None, message_type: str | None,
                 endpoints: str) -> None:  # fmt: skip
    """Create topic NAME, or change the settings given of an existing one."""
    with _client(endpoints) as client:
        config = client.create_topic(
            name, queues=queues, read_queues=read_queues, write_queues=write_queues,
            perm=int(perm) if perm else None,
            message_type=message_type.upper() if message_type else None)  # fmt: skip
    verb = "created" if config["created"] else "updated"
    click.echo(f"topic {name} {verb}: {config['read_queue_nums']} read / "
               f"{config['write_queue_nums']} write queues, perm {config['perm']}, "
               f"type {config['message_type']}")  # fmt: skip


@topic.command("list")
@click.option("--all", "include_system", is_flag=True, help="include the broker's own topics")
@endpoints_option
def topic_list(include_system: bool, endpoints: str) -> None:
    """List topics."""
    with _client(endpoints) as client:
        topics = client.list_topics(include_system=include_system)
    _table("topics", ["topic", "read queues", "write queues", "perm", "type"],
           [(t["name"], t["read_queue_nums"], t["write_queue_nums"], t["perm"],
             t["message_type"]) for t in topics])  # fmt: skip


@topic.command("status")
@click.argument("name")
@endpoints_option
def topic_status(name: str, endpoints: str) -> None:
    """Per-queue min and max offsets of topic NAME."""
    with _client(endpoints) as client:
        rows = client.topic_status(name)
    _table(f"topic {name}", ["queue", "min offset", "max offset", "messages"],
           [(r["queue_id"], r["min_offset"], r["max_offset"], r["max_offset"] - r["min_offset"])
            for r in rows])  # fmt: skip


@topic.command("delete")
@click.argument("name")
@endpoints_option
def topic_delete(name: str, endpoints: str) -> None:
    """Delete topic NAME (its queues and committed offsets go too)."""
    with _client(endpoints) as client:
        client.delete_topic(name)
    click.echo(f"topic {name} deleted")


# ---- groups ---------------------------------------------------------------------------------


@cli.group()
def group() -> None:
    """Create, list and inspect consumer groups."""


@group.command("create")
@click.argument("name")
@click.option("--max-retries", type=click.IntRange(0, 1000))
@click.option("--retry-backoff", help="1s,5s,... | delay_level | exponential:1s,2,1m")
@click.option("--fifo/--no-fifo", default=None, help="ordered consumption per message group")
@click.option("--broadcast/--clustering", default=None)
@click.option("--consume-from", type=click.Choice(["last_offset", "first_offset", "timestamp"]))
@endpoints_option
def group_create(name: str, max_retries: int | None, retry_backoff: str | None,
                 fifo: bool | None, broadcast: bool | None, consume_from: str | None,
                 endpoints: str) -> None:  # fmt: skip
    """Create consumer group NAME, or change the settings given of an existing one."""
    with _client(endpoints) as client:
        config = client.create_group(name, max_retries=max_retries, retry_backoff=retry_backoff,
                                     fifo=fifo, broadcast=broadcast,
                                     consume_from_where=consume_from)  # fmt: skip
    policy = config["retry_policy"]
    verb = "created" if config["created"] else "updated"
    click.echo(f"group {name} {verb}: max retries {policy['max_retries']}, backoff "
               f"{_describe_backoff(policy['backoff'])}, fifo {config['fifo']}, "
               f"broadcast {config['broadcast']}")  # fmt: skip


def _describe_backoff(b: dict[str, Any]) -> str:
    if b["type"] == "custom":
        return ",".join(f"{ms}ms" for ms in b["delays_ms"])
    if b["type"] == "exponential":
        return f"{b['initial_ms']}ms x{b['multiplier']} up to {b['max_ms']}ms"
    return "delay levels"


@group.command("list")
@endpoints_option
def group_list(endpoints: str) -> None:
    """List consumer groups."""
    with _client(endpoints) as client:
        groups = client.list_groups()
    _table("groups", ["group", "max retries", "backoff", "fifo", "broadcast", "consume from"],
           [(g["name"], g["retry_policy"]["max_retries"],
             _describe_backoff(g["retry_policy"]["backoff"]), g["fifo"], g["broadcast"],
             g["consume_from_where"]) for g in groups])  # fmt: skip


@group.command("progress")
@click.argument("name")
@click.option("--topic", "topic_name", help="only this topic")
@endpoints_option
def group_progress(name: str, topic_name: str | None, endpoints: str) -> None:
    """Per-queue broker offset, consumer offset and lag of group NAME."""
    with _client(endpoints) as client:
        progress = client.group_progress(name, topic_name)
    _table(f"group {name} (total lag {progress['total_lag']})",
           ["topic", "queue", "broker offset", "consumer offset", "lag"],
           [(r["topic"], r["queue_id"], r["broker_offset"], r["consumer_offset"], r["lag"])
            for r in progress["queues"]])  # fmt: skip


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
@click.argument("body")
@click.option("--tag")
@click.option("--keys", help="comma-separated keys (searchable with 'message query --key')")
@click.option("--property", "pairs", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--group", "message_group", help="message group (FIFO)")
@click.option("--delay", help="deliver later, e.g. 10s, 5m")
@endpoints_option
def send(topic_name: str, body: str, tag: str | None, keys: str | None, pairs: Sequence[str],
         message_group: str | None, delay: str | None, endpoints: str) -> None:  # fmt: skip
    """Send one message with BODY (UTF-8 text) to TOPIC."""
    deliver_ms = time.time_ns() // 1_000_000 + parse_duration_ms(delay) if delay else None
    message = OutgoingMessage(
        body.encode("utf-8"), tag, [k for k in (keys or "").split(",") if k],
        _properties(pairs), message_group, deliver_ms)  # fmt: skip
    with _client(endpoints) as client:
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


def _start_offsets(client: RocketMQClient, group_name: str, topic_name: str,
                   start: str | None) -> dict[int, int]:  # fmt: skip
    """Where to read each queue: --from, else the group's committed offset (a group that
    never committed starts where its consume-from-where says: latest by default)."""
    offsets = {}
    for row in client.topic_status(topic_name):
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
@click.option("--from", "start", type=click.Choice(["earliest", "latest"]),
              help="start here instead of the group's committed offsets")  # fmt: skip
@click.option("--max", "max_messages", type=click.IntRange(1), help="stop after N messages")
@click.option("--tag", "tag_expression", help="tag filter, e.g. 'TagA||TagB'")
@endpoints_option
def consume(topic_name: str, group_name: str, start: str | None, max_messages: int | None,
            tag_expression: str | None, endpoints: str) -> None:  # fmt: skip
    """Print messages of TOPIC and commit the group's offsets; stops when caught up."""
    count, limit = 0, max_messages or sys.maxsize
    with _client(endpoints) as client:
        offsets = _start_offsets(client, group_name, topic_name, start)
        active = sorted(offsets)
        while active and count < limit:
            for qid in list(active):
                batch = client.pull(group_name, topic_name, qid, offsets[qid],
                                    min(PULL_BATCH, limit - count),
                                    filter_expression=tag_expression, with_bounds=False)
                for msg in batch.messages:
                    tag = f" tag={msg.tag}" if msg.tag else ""
                    keys = f" keys={','.join(msg.keys)}" if msg.keys else ""
                    body = msg.body.decode("utf-8", errors="replace")
                    click.echo(f"[{qid}:{msg.queue_offset}] {msg.message_id}{tag}{keys} {body}")
                count += len(batch.messages)
                if batch.next_offset != offsets[qid]:
                    client.update_offset(group_name, topic_name, qid, batch.next_offset)
                elif not batch.messages:
                    active.remove(qid)  # caught up
                offsets[qid] = batch.next_offset
                if count >= limit:
                    break
    click.echo(f"consumed {count} message(s); offsets of {group_name} committed", err=True)


@cli.group()
def message() -> None:
    """Look messages up."""


@message.command("query")
@click.option("--id", "message_id", help="message id")
@click.option("--key", help="message key (needs --topic)")
@click.option("--topic", "topic_name")
@click.option("--max", "max_results", type=click.IntRange(1, 1000), default=32, show_default=True)
@endpoints_option
def message_query(message_id: str | None, key: str | None, topic_name: str | None,
                  max_results: int, endpoints: str) -> None:  # fmt: skip
    """Find messages by --id, or by --key within --topic."""
    if (message_id is None) == (key is None):
        raise click.UsageError("give exactly one of --id and --key")
    if key is not None and topic_name is None:
        raise click.UsageError("--key needs --topic")
    with _client(endpoints) as client:
        found = client.query_message(message_id=message_id, key=key, topic=topic_name,
                                     max_results=max_results, text_bodies=True)  # fmt: skip
    if not found:
        click.echo(f"no message with key {key!r} in {topic_name}")
    for msg in found:
        body = msg["body"] if msg["body_encoding"] == "text" else f"(base64) {msg['body']}"
        _table(f"message {msg['message_id']}", ["field", "value"], [
            ("topic", msg["topic"]), ("queue", msg["queue_id"]), ("offset", msg["queue_offset"]),
            ("tag", msg["tag"] or ""), ("keys", ",".join(msg["keys"])),
            ("born", f"{_iso(msg['born_timestamp_ms'])} from {msg['born_host']}"),
            ("stored", f"{_iso(msg['store_timestamp_ms'])} at {msg['store_host']}"),
            ("reconsume times", msg["reconsume_times"]),
            ("properties", ", ".join(f"{k}={v}" for k, v in sorted(msg["properties"].items()))),
            ("body", f"{body} ({msg['body_bytes']} bytes)"),
        ])  # fmt: skip


# ---- offsets --------------------------------------------------------------------------------


@cli.group()
def offset() -> None:
    """Move consumer group offsets."""


@offset.command("reset")
@click.option("--group", "group_name", required=True)
@click.option("--topic", "topic_name", required=True)
@click.option("--to", "target", required=True, help="earliest | latest | ms | ISO-8601 time")
@endpoints_option
def offset_reset(group_name: str, topic_name: str, target: str, endpoints: str) -> None:
    """Move GROUP's offsets in every queue of TOPIC."""
    with _client(endpoints) as client:
        offsets = client.reset_offset(group_name, topic_name, target)
    _table(f"{group_name} on {topic_name} reset to {target}", ["queue", "offset"],
           sorted(offsets.items()))


def main(argv: Sequence[str] | None = None) -> None:
    """The ``rmq`` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="rmq")


# rmq user / rmq acl live in their own module; importing it registers them on ``cli``.
import broker_core.cli_auth  # noqa: E402, F401
