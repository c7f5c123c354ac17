"""``rmq``: run a broker and administer it — mqadmin's everyday verbs.

``rmq broker start|config``, ``rmq namesrv start``, ``rmq topic create|list|status|delete``,
``rmq group
create|list|progress``, ``rmq send``, ``rmq consume``, ``rmq message query``, ``rmq offset
reset``; ``rmq --version``. Verbs that print a table take ``--json`` for JSON instead.
Example::

    rmq topic create orders --queues 4 --endpoints 127.0.0.1:8081
    rmq send orders 'hello' --tag TagA --keys k1,k2 --property region=eu --delay 10s
    rmq consume orders --group GID_cli --from earliest --max 10 --tag 'TagA||TagB'

Every command that talks to a broker takes ``--endpoints HOST:PORT`` (default
``127.0.0.1:8081``, or ``$RMQ_ENDPOINTS``). Expected failures (broker unreachable, unknown
topic, bad arguments) print one line ``Error: ...`` and exit with status 1; no traceback.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO, TypeVar

import click
from rich.console import Console
from rich.table import Table

from broker_core import cli_cluster
from broker_core.client import OutgoingMessage, ReceivedMessage, RocketMQClient
from broker_core.client.env import client_settings
from broker_core.errors import RocketMQError
from broker_core.protocol.durations import parse_duration_ms

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
    return click.option(
        "--endpoints",
        envvar="RMQ_ENDPOINTS",
        default=DEFAULT_ENDPOINTS,
        show_default=True,
        help="broker HOST:PORT",
    )(command)


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


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")(
        command
    )


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


@click.group(cls=_Rmq)
@click.version_option(
    package_name="rocketmq-spark", prog_name="rmq", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Run and administer a RocketMQ-style broker."""


# ---- broker ---------------------------------------------------------------------------------


@cli.group()
def broker() -> None:
    """Run a broker."""


@broker.command("start")
@click.option(
    "--listen",
    default="127.0.0.1:8081",
    show_default=True,
    help="HOST:PORT to serve on; port 1..65535, or 0 for any free port (printed)",
)
@click.option(
    "--store-dir",
    default=".rocketmq/store",
    show_default=True,
    help="directory of the commitlog, queues, index and config files",
)
@click.option(
    "--flush",
    type=click.Choice(["sync", "async"]),
    default=None,
    help="sync: acknowledge sends once on disk; async: flush every "
    "flush_interval_ms  [default: the config's flush_mode, async]",
)
@click.option("--config", "config_file", default=None, help="TOML file with [broker], [store]")
@click.option("--advertise", default=None, help="endpoint clients are given in routes")
@click.option("--namesrv", default=None, help="join a cluster: NameServers HOST:PORT[;HOST:PORT]")
@click.option("--broker-name", default=None, help="broker group name (unique in the cluster)")
@click.option("--cluster", "cluster_name", default=None, help="cluster name [DefaultCluster]")
@click.option("--register-interval-ms", type=int, default=None, help="re-register period [30000]")
@click.option("--route-ttl-ms", type=int, default=None, help="cluster route cache life [3000]")
@click.option("--broker-id", type=int, default=None, help="0 = the group's master, > 0 = a slave")
@click.option("--ha-listen", default=None, help="master: HOST:PORT its slaves replicate from")
@click.option("--ha-master", default=None, help="slave: its master's HA HOST:PORT")
@click.option(
    "--replication",
    type=click.Choice(["sync", "async"]),
    default=None,
    help="sync: a send is acknowledged once the in-sync slaves have it",
)
@click.option(
    "--remoting-listen",
    default=None,
    help="HOST:PORT for 4.x remoting clients ['off'; with --namesrv HOST:10911]",
)
@click.option("--metrics-listen", default=None, help="Prometheus /metrics on HOST:PORT")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    help="least severe level logged",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    help="one JSON object a line, or text",
    type=click.Choice(["text", "json"]),
)
@click.option(
    "--controller",
    default=None,
    help="etcd http://HOST:PORT[,…]: the group elects its master automatically",
)
@click.option(
    "--no-extensions",
    is_flag=True,
    help="serve the standard apache.rocketmq.v2 protocol only (no admin or bulk service), "
    "like any RocketMQ 5 proxy",
)
def broker_start(
    listen: str,
    store_dir: str,
    flush: str | None,
    config_file: str | None,
    advertise: str | None,
    namesrv: str | None,
    broker_name: str | None,
    cluster_name: str | None,
    register_interval_ms: int | None,
    route_ttl_ms: int | None,
    broker_id: int | None,
    ha_listen: str | None,
    ha_master: str | None,
    replication: str | None,
    remoting_listen: str | None,
    metrics_listen: str | None,
    log_level: str,
    log_format: str,
    controller: str | None,
    no_extensions: bool,
) -> None:
    """Start a broker in the foreground; prints READY HOST:PORT, stops on SIGTERM/Ctrl-C."""
    from broker_core.server.app import run  # grpc server machinery only when needed

    argv = [
        "--listen",
        listen,
        "--store-dir",
        store_dir,
        "--log-level",
        log_level,
        "--log-format",
        log_format,
    ]
    options = {
        "--flush": flush,
        "--config": config_file,
        "--advertise": advertise,
        "--namesrv": namesrv,
        "--broker-name": broker_name,
        "--cluster": cluster_name,
        "--register-interval-ms": register_interval_ms,
        "--route-ttl-ms": route_ttl_ms,
        "--broker-id": broker_id,
        "--ha-listen": ha_listen,
        "--ha-master": ha_master,
        "--replication": replication,
        "--remoting-listen": remoting_listen,
        "--metrics-listen": metrics_listen,
        "--controller": controller,
    }
    argv += [
        str(text) for flag, value in options.items() if value is not None for text in (flag, value)
    ]
    if no_extensions:
        argv.append("--no-extensions")
    raise SystemExit(run(argv))  # our errors say what failed: listen, store, config, stop


@broker.command("config")
@click.option(
    "--defaults",
    "show_defaults",
    is_flag=True,
    help="print every config key with its default and meaning",
)
@click.option(
    "--config",
    "config_file",
    default=None,
    help="check this TOML file and print the settings it gives",
)
def broker_config(show_defaults: bool, config_file: str | None) -> None:
    """Print the broker's config keys as TOML (a starting point for --config FILE)."""
    from broker_core.config import load_config
    from broker_core.config_reference import as_toml, defaults_toml

    if show_defaults == (config_file is not None):
        raise click.UsageError("give exactly one of --defaults and --config FILE")
    if config_file is None:
        click.echo(defaults_toml(), nl=False)
        return
    broker_cfg, store_cfg = load_config(config_file)  # ConfigError names the key
    values = {
        "broker": {f: getattr(broker_cfg, f) for f in broker_cfg.__dataclass_fields__},
        "store": {f: getattr(store_cfg, f) for f in store_cfg.__dataclass_fields__},
    }
    click.echo(as_toml(values, f"effective settings of {config_file}"), nl=False)


# ---- namesrv --------------------------------------------------------------------------------


@cli.group()
def namesrv() -> None:
    """Run a NameServer."""


@namesrv.command("start")
@click.option("--listen", default="127.0.0.1:9876", show_default=True, help="HOST:PORT (0 = any)")
@click.option(
    "--scan-interval-ms",
    type=click.IntRange(min=1),
    default=5_000,
    show_default=True,
    help="how often expired brokers are looked for",
)
@click.option(
    "--broker-expiry-ms",
    type=click.IntRange(min=1),
    default=120_000,
    show_default=True,
    help="a broker silent this long is dropped from routes",
)
@click.option("--tls-cert", default=None, help="PEM certificate: serve TLS (with --tls-key)")
@click.option("--tls-key", default=None, help="PEM private key of --tls-cert")
@click.option("--tls-ca", default=None, help="PEM CA: require client certificates it signed")
def namesrv_start(
    listen: str,
    scan_interval_ms: int,
    broker_expiry_ms: int,
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
) -> None:
    """Start a NameServer in the foreground; prints READY HOST:PORT, stops on SIGTERM/Ctrl-C."""
    from broker_core.namesrv.server import run

    timers = ["--scan-interval-ms", str(scan_interval_ms)]
    timers += ["--broker-expiry-ms", str(broker_expiry_ms)]
    tls = [f"--tls-{k}={v}" for k, v in (("cert", tls_cert), ("key", tls_key), ("ca", tls_ca)) if v]
    try:
        code = run(["--listen", listen, *timers, *tls])
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {listen}: {exc}") from None
    raise SystemExit(code)


@broker.command("replication")
@endpoints_option
def broker_replication(endpoints: str) -> None:
    """The broker's place in its group: role, HA addresses, slaves and the in-sync set."""
    with _client(endpoints) as client:
        health = client.health()
    status = health.get("replication", {})
    fields = (
        "role",
        "broker_id",
        "replication",
        "ha_endpoint",
        "master",
        "connected",
        "last_error",
    )
    _table(
        f"broker {health.get('broker_name', '')}",
        ["field", "value"],
        [(f, status[f]) for f in fields if f in status],
    )
    if status.get("role") == "master":
        in_sync = status.get("in_sync", {})
        _table(
            "slaves",
            ["slave", "acked offset", "in sync"],
            [
                (name, acked, "yes" if name in in_sync else "no")
                for name, acked in sorted(status.get("slaves", {}).items())
            ],
        )


@broker.command("controller")
@click.option(
    "--controller",
    required=True,
    envvar="RMQ_CONTROLLER",
    help="etcd http://HOST:PORT[,…] the broker groups use",
)
@json_option
def broker_controller(controller: str, as_json: bool) -> None:
    """Each controller-mode group: master, epoch, in-sync set and live members (from etcd)."""
    from broker_core.ha.etcd_state import all_groups

    groups = all_groups(controller)  # ControllerError when etcd cannot be reached
    rows: list[tuple[Any, ...]] = []
    for name, (state, members) in groups.items():
        live = ", ".join(
            f"{n} {m.get('endpoint', '')} @{m.get('offset', -1)}"
            for n, m in sorted(members.items())
        )
        if state is None:
            rows.append((name, "-", "-", "-", "-", live))
        else:
            rows.append(
                (name, state.master, state.epoch, ", ".join(state.in_sync), state.set_epoch, live)
            )
    if as_json:
        _print_json(
            {
                name: {"state": None if st is None else json.loads(st.to_json()), "members": mem}
                for name, (st, mem) in groups.items()
            }
        )
        return
    _table(
        "controller groups",
        [
            "group",
            "master",
            "epoch",
            "in-sync set",
            "set epoch",
            "live members (endpoint @commitlog end)",
        ],
        rows,
    )


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
    update: bool,
    force: bool,
    endpoints: str,
    namesrv: str | None,
    broker_name: str | None,
) -> None:
    """Create topic NAME; with --update, change the settings given of an existing one;
    with --namesrv on every broker group of the cluster (or --broker NAME only)."""
    settings: dict[str, Any] = {
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


@topic.command("list")
@click.option("--all", "include_system", is_flag=True, help="include the broker's own topics")
@json_option
@endpoints_option
def topic_list(include_system: bool, as_json: bool, endpoints: str) -> None:
    """List topics."""
    with _client(endpoints) as client:
        topics = client.list_topics(include_system=include_system)
    if as_json:
        return _print_json(topics)
    _table(
        "topics",
        ["topic", "read queues", "write queues", "perm", "type"],
        [
            (t["name"], t["read_queue_nums"], t["write_queue_nums"], t["perm"], t["message_type"])
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


def _start_offsets(
    client: RocketMQClient, group_name: str, topic_name: str, start: str | None
) -> dict[int, int]:
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


cli_cluster.install(cli, topic, _table, _iso)


def main(argv: Sequence[str] | None = None) -> None:
    """The ``rmq`` console script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="rmq")


# rmq user / rmq acl live in their own module; importing it registers them on ``cli``.
import broker_core.cli_auth  # noqa: E402, F401
