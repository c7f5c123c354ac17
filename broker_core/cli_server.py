"""``rmq broker start|config|replication|controller`` and ``rmq namesrv start``."""

from __future__ import annotations

import functools
import json
from typing import Any

import click

from broker_core.cli_base import (
    _client,
    _print_json,
    _table,
    cli,
    endpoints_option,
    json_option,
)

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
    from broker_core.server.main import run  # grpc server machinery only when needed

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


@broker.group("config", invoke_without_command=True)
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
@click.pass_context
def broker_config(ctx: click.Context, show_defaults: bool, config_file: str | None) -> None:
    """Print the broker's config keys as TOML (a starting point for --config FILE); or
    read a running broker's settings (get) and change the live ones (set)."""
    if ctx.invoked_subcommand is not None:
        if show_defaults or config_file is not None:
            raise click.UsageError("--defaults/--config check a file; get/set ask a broker")
        return
    from broker_core.auth.config import load_security
    from broker_core.config import load_config
    from broker_core.config_reference import as_toml, defaults_toml, security_toml

    if show_defaults == (config_file is not None):
        raise click.UsageError("give exactly one of --defaults and --config FILE")
    if config_file is None:
        click.echo(defaults_toml(), nl=False)
        return
    broker_cfg, store_cfg = load_config(config_file)  # the whole file, as broker start does
    values = {
        "broker": {f: getattr(broker_cfg, f) for f in broker_cfg.__dataclass_fields__},
        "store": {f: getattr(store_cfg, f) for f in store_cfg.__dataclass_fields__},
    }
    click.echo(as_toml(values, f"effective settings of {config_file}"), nl=False)
    click.echo(security_toml(*load_security(config_file)), nl=False)


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


@broker.command("status")
@json_option
@endpoints_option
def broker_status(as_json: bool, endpoints: str) -> None:
    """Runtime figures of the broker (mqadmin brokerStatus): commitlog offsets, put rate,
    each background service's state and the replication role."""
    with _client(endpoints) as client:
        health = client.health()
    if as_json:
        return _print_json(health)
    replication = health.get("replication", {})
    rows = [
        ("broker", health.get("broker_name", "")),
        ("endpoint", health.get("endpoint", "")),
        ("commitlog min offset", health.get("commitlog_min_offset", "")),
        ("commitlog max offset", health.get("commitlog_max_offset", "")),
        ("commitlog flushed offset", health.get("commitlog_flushed_offset", "")),
        ("put tps", f"{float(health.get('put_tps', 0.0)):.1f}"),
        ("role", replication.get("role", "")),
    ]
    rows += [(f"service {name}", state) for name, state in health.get("services", {}).items()]
    _table(f"broker {health.get('broker_name', '')}", ["field", "value"], rows)


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
    if as_json:
        _print_json(
            {
                name: {
                    "state": None if st is None else json.loads(st.to_json()),
                    "members": mem,
                    "names": {n: member_label(name, n, st, ids) for n in mem},
                }
                for name, (st, mem, ids) in groups.items()
            }
        )
        return
    rows: list[tuple[Any, ...]] = []
    for name, (state, members, ids) in groups.items():
        label = functools.partial(member_label, name, state=state, ids=ids)
        live = ", ".join(
            f"{label(n)} @{m.get('offset', -1)}"
            for n, m in sorted(members.items(), key=lambda kv: label(kv[0]))
        )
        if state is None:
            rows.append((name, "-", "-", "-", live))
        else:
            in_sync = ", ".join(sorted(label(n) for n in state.in_sync))
            rows.append((name, label(state.master), state.epoch, in_sync, live))
    _table(
        "controller groups (members as broker/id; @ = commitlog end)",
        ["group", "master", "epoch", "in sync", "live members"],
        rows,
    )


def member_label(group: str, node: str, state: Any, ids: dict[str, int]) -> str:
    """A controller node as users name brokers: ``group/member id`` (a master that never
    was a slave holds no id: broker id 0); the node name when it holds none yet (pure)."""
    if node in ids:
        return f"{group}/{ids[node]}"
    if state is not None and state.master == node:
        return f"{group}/0"
    return node
