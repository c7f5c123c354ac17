"""``rmq topic create|list|status|delete`` and ``rmq group
create|list|progress|clients|delete``."""

from __future__ import annotations

from typing import Any

import click

from broker_core import cli_cluster
from broker_core.cli_base import (
    _client,
    _print_json,
    _table,
    broker_client,
    cli,
    endpoints_option,
    json_option,
)
from broker_core.errors import GroupNotFoundError, TopicNotFoundError

# ---- topics ---------------------------------------------------------------------------------


@cli.group()
def topic() -> None:
    """Create, list, inspect and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1024), help="read and write queue count")
@click.option("--read-queues", type=click.IntRange(1, 1024), help="queues consumers read")
@click.option("--write-queues", type=click.IntRange(1, 1024), help="queues producers write")
@click.option("--perm", type=click.Choice(["2", "4", "6"]), help="2 write, 4 read, 6 both")
@click.option(
    "--type",
    "message_type",
    help="the topic's message type (default MIXED)",
    type=click.Choice(
        ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED"],
        case_sensitive=False,
    ),
)
@click.option(
    "--attribute",
    "attributes",
    multiple=True,
    metavar="KEY=VALUE",
    help="a topic attribute (repeat for more; with --update they replace the topic's), "
    "e.g. dedup=false: sends to it are not deduplicated",
)
@click.option("--update", is_flag=True, help="change an existing topic's settings")
@click.option(
    "--force",
    is_flag=True,
    help="with --update: allow fewer read queues (hides the upper queues' messages)",
)
@endpoints_option
@cli_cluster.namesrv_option(required=False)
@click.option("--broker", "broker_name", help="with --namesrv: only this broker group")
def topic_create(
    name: str,
    queues: int | None,
    read_queues: int | None,
    write_queues: int | None,
    perm: str | None,
    message_type: str | None,
    attributes: tuple[str, ...],
    update: bool,
    force: bool,
    endpoints: str,
    namesrv: str | None,
    broker_name: str | None,
) -> None:
    """Create topic NAME; with --update, change the settings given of an existing one;
    with --namesrv on every broker group of the cluster (or --broker NAME only)."""
    pairs = [a.partition("=") for a in attributes]
    if any(not key or not sep for key, sep, _ in pairs):
        raise click.BadParameter("give each as KEY=VALUE", param_hint="--attribute")
    settings: dict[str, Any] = {
        "attributes": {key: value for key, _, value in pairs} if pairs else None,
        "queues": queues,
        "read_queues": read_queues,
        "write_queues": write_queues,
        "perm": int(perm) if perm else None,
        "message_type": message_type.upper() if message_type else None,
        "update": update,
        "force": force,
    }
    if broker_name and not namesrv:
        raise click.UsageError("--broker needs --namesrv")
    if namesrv:
        done = cli_cluster.create_topic_everywhere(namesrv, broker_name, name, **settings)
    else:
        with _client(endpoints) as client:
            done = [("", client.create_topic(name, **settings))]
    for broker_group, config in done:
        where = f" on {broker_group}" if broker_group else ""
        for warning in config.get("warnings", []):
            click.echo(f"Warning{where}: {warning}", err=True)
        verb = "created" if config["created"] else "updated" if config["changed"] else "unchanged"
        click.echo(
            f"topic {name} {verb}{where}: {config['read_queue_nums']} read / "
            f"{config['write_queue_nums']} write queues, perm {config['perm']}, "
            f"type {config['message_type']}"
        )


# Topics our own tools keep for their bookkeeping, hidden like the broker's own: the Spark
# sink's exactly-once markers (connector/exactly_once.py's MARKER_TOPIC_PREFIX).
TOOL_TOPIC_PREFIXES = ("%SPARK_SINK%",)


@topic.command("list")
@click.option(
    "--all",
    "include_system",
    is_flag=True,
    help="include the broker's own topics and the Spark sink's %SPARK_SINK% marker topics",
)
@json_option
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def topic_list(include_system: bool, as_json: bool, endpoints: str, namesrv: str | None) -> None:
    """List topics (the broker's and our tools' own topics only with --all; with --namesrv:
    of every broker group of the cluster, each row naming its broker)."""
    addrs = cli_cluster.broker_addrs(namesrv) if namesrv else {"": endpoints}
    topics = []
    for broker, addr in addrs.items():
        with broker_client(addr) as client:
            found = client.list_topics(include_system=include_system)
        topics += [{**t, "broker": broker} if namesrv else t for t in found]
    if not include_system:
        topics = [t for t in topics if not t["name"].startswith(TOOL_TOPIC_PREFIXES)]
    if as_json:
        return _print_json(topics)
    columns = ["topic", "read queues", "write queues", "perm", "type"]
    _table(
        "topics",
        (["broker"] if namesrv else []) + columns,
        [
            ([t["broker"]] if namesrv else [])
            + [t["name"], t["read_queue_nums"], t["write_queue_nums"], t["perm"], t["message_type"]]
            for t in topics
        ],
    )


@topic.command("status")
@click.argument("name")
@json_option
@endpoints_option
def topic_status(name: str, as_json: bool, endpoints: str) -> None:
    """Per-queue min and max offsets of topic NAME."""
    with _client(endpoints) as client:
        rows = client.topic_status(name)
    if as_json:
        return _print_json(rows)
    _table(
        f"topic {name}",
        ["queue", "min offset", "max offset", "messages"],
        [
            (r["queue_id"], r["min_offset"], r["max_offset"], r["max_offset"] - r["min_offset"])
            for r in rows
        ],
    )


@topic.command("delete")
@click.argument("name")
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def topic_delete(name: str, endpoints: str, namesrv: str | None) -> None:
    """Delete topic NAME (its queues and committed offsets go too; with --namesrv: on every
    broker group of the cluster that has it)."""
    addrs = cli_cluster.broker_addrs(namesrv) if namesrv else {"": endpoints}
    deleted = []
    for broker, addr in addrs.items():
        with broker_client(addr) as client:
            try:
                client.delete_topic(name)
            except TopicNotFoundError:
                if not namesrv:
                    raise
                continue  # the topic does not live on that broker
        deleted.append(broker)
    if not deleted:
        raise TopicNotFoundError(f"topic {name!r} is on no broker of the cluster")
    click.echo(f"topic {name} deleted" + (f" on {', '.join(deleted)}" if namesrv else ""))


# ---- groups ---------------------------------------------------------------------------------


@cli.group()
def group() -> None:
    """Create, list and inspect consumer groups."""


@group.command("create")
@click.argument("name")
@click.option(
    "--max-retries",
    type=click.IntRange(0, 1000),
    help="deliveries retried before a message goes to the group's %DLQ% topic",
)
@click.option("--retry-backoff", help="1s,5s,... | delay_level | exponential:1s,2,1m")
@click.option("--fifo/--no-fifo", default=None, help="ordered consumption per message group")
@click.option(
    "--broadcast/--clustering",
    default=None,
    help="every consumer gets every message / consumers share the queues",
)
@click.option(
    "--consume-from",
    type=click.Choice(["last_offset", "first_offset", "timestamp"]),
    help="where a group without committed offsets starts",
)
@click.option("--update", is_flag=True, help="change an existing group's settings")
@endpoints_option
def group_create(
    name: str,
    max_retries: int | None,
    retry_backoff: str | None,
    fifo: bool | None,
    broadcast: bool | None,
    consume_from: str | None,
    update: bool,
    endpoints: str,
) -> None:
    """Create consumer group NAME; with --update, change the settings given of an existing one."""
    with _client(endpoints) as client:
        config = client.create_group(
            name,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            fifo=fifo,
            broadcast=broadcast,
            consume_from_where=consume_from,
            update=update,
        )
    policy = config["retry_policy"]
    verb = "created" if config["created"] else "updated" if config["changed"] else "unchanged"
    click.echo(
        f"group {name} {verb}: max retries {policy['max_retries']}, backoff "
        f"{_describe_backoff(policy['backoff'])}, fifo {config['fifo']}, "
        f"broadcast {config['broadcast']}"
    )


def _describe_backoff(b: dict[str, Any]) -> str:
    if b["type"] == "custom":
        return ",".join(f"{ms}ms" for ms in b["delays_ms"])
    if b["type"] == "exponential":
        return f"{b['initial_ms']}ms x{b['multiplier']} up to {b['max_ms']}ms"
    return "delay levels"


@group.command("list")
@json_option
@endpoints_option
def group_list(as_json: bool, endpoints: str) -> None:
    """List consumer groups."""
    with _client(endpoints) as client:
        groups = client.list_groups()
    if as_json:
        return _print_json(groups)
    _table(
        "groups",
        ["group", "max retries", "backoff", "fifo", "broadcast", "consume from"],
        [
            (
                g["name"],
                g["retry_policy"]["max_retries"],
                _describe_backoff(g["retry_policy"]["backoff"]),
                g["fifo"],
                g["broadcast"],
                g["consume_from_where"],
            )
            for g in groups
        ],
    )


@group.command("progress")
@click.argument("name")
@click.option("--topic", "topic_name", help="only this topic")
@json_option
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def group_progress(
    name: str, topic_name: str | None, as_json: bool, endpoints: str, namesrv: str | None
) -> None:
    """Per-queue broker offset, consumer offset and lag of group NAME (with --namesrv:
    of every broker group of the cluster)."""
    if namesrv:
        rows = cli_cluster.progress_everywhere(namesrv, name, topic_name)
        if as_json:
            keys = ("broker", "topic", "queue_id", "broker_offset", "consumer_offset", "lag")
            return _print_json([dict(zip(keys, row, strict=True)) for row in rows])
        _table(
            f"group {name} (total lag {sum(r[5] for r in rows)})",
            ["broker", "topic", "queue", "broker offset", "consumer offset", "lag"],
            rows,
        )
        return
    with _client(endpoints) as client:
        progress = client.group_progress(name, topic_name)
    if as_json:
        return _print_json(progress)
    _table(
        f"group {name} (total lag {progress['total_lag']})",
        ["topic", "queue", "broker offset", "consumer offset", "lag"],
        [
            (r["topic"], r["queue_id"], r["broker_offset"], r["consumer_offset"], r["lag"])
            for r in progress["queues"]
        ],
    )


@group.command("clients")
@click.argument("name")
@json_option
@endpoints_option
def group_clients(name: str, as_json: bool, endpoints: str) -> None:
    """The online consumers of group NAME (gRPC and 4.x clients alike; mqadmin's
    consumerConnection)."""
    with _client(endpoints) as client:
        clients = client.group_progress(name)["clients"]
    if as_json:
        return _print_json({"group": name, "clients": clients})
    _table(f"group {name}: {len(clients)} online", ["client id"], [(c,) for c in clients])


@group.command("delete")
@click.argument("name")
@json_option
@endpoints_option
@cli_cluster.namesrv_option(required=False)
def group_delete(name: str, as_json: bool, endpoints: str, namesrv: str | None) -> None:
    """Delete group NAME: its config and committed offsets (mqadmin deleteSubGroup; with
    --namesrv: on every broker group of the cluster that has it)."""
    addrs = cli_cluster.broker_addrs(namesrv) if namesrv else {"": endpoints}
    deleted = []
    for broker, addr in addrs.items():
        with broker_client(addr) as client:
            try:
                client.delete_group(name)
            except GroupNotFoundError:
                if not namesrv:
                    raise
                continue  # the group does not live on that broker
        deleted.append(broker or addr)
    if not deleted:
        raise GroupNotFoundError(f"consumer group {name!r} is on no broker of the cluster")
    if as_json:
        return _print_json({"deleted": name, "brokers": deleted})
    click.echo(f"group {name} deleted" + (f" on {', '.join(deleted)}" if namesrv else ""))
