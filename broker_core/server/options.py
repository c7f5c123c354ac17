"""The broker process's command line (``python -m broker_core.server``) and the settings
derived from its flags alone; ``assembly.build`` turns them into a server."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker_core.errors import ConfigError
from broker_core.metrics import logs

if TYPE_CHECKING:
    from broker_core.server.cluster_member import ClusterOptions

DESCRIPTION = "Run a RocketMQ-compatible broker (gRPC, 4.x remoting, admin and bulk services)."


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m broker_core.server", description=DESCRIPTION)
    p.add_argument("--listen", default="127.0.0.1:8081", help="HOST:PORT (port 0 = any)")
    p.add_argument("--advertise", default=None, help="endpoint given to clients in routes")
    p.add_argument("--store-dir", default=".rocketmq/store", help="the store's directory")
    p.add_argument(
        "--flush",
        choices=("sync", "async"),
        default=None,
        help="sync: acknowledge after fsync; default: the config's flush_mode (async)",
    )
    p.add_argument("--config", default=None, help="TOML file with [broker] and [store]")
    p.add_argument("--namesrv", default=None, help="NameServers HOST:PORT[;HOST:PORT]")
    p.add_argument(
        "--broker-name",
        default=None,
        help="broker group name (default with --namesrv: host + store digest)",
    )
    p.add_argument("--cluster", default=None, help="cluster name (default DefaultCluster)")
    p.add_argument(
        "--register-interval-ms",
        type=int,
        default=None,
        help="re-registration period (default 30000)",
    )
    p.add_argument(
        "--route-ttl-ms",
        type=int,
        default=None,
        help="how long cluster routes are cached (default 3000)",
    )
    p.add_argument(
        "--remoting-listen",
        default=None,
        help="HOST:PORT for RocketMQ 4.x remoting clients (default with --namesrv: "
        "the --listen host, port 10911; 'off' disables)",
    )
    _add_group_args(p)
    p.add_argument(
        "--metrics-listen",
        default=None,
        help="serve Prometheus metrics on HOST:PORT/metrics (off by default)",
    )
    p.add_argument(
        "--no-extensions",
        action="store_true",
        help="serve apache.rocketmq.v2 only, as any RocketMQ 5 proxy: no admin or bulk "
        "service (the config's grpc_extensions = false)",
    )
    p.add_argument("--log-level", default="INFO", choices=logs.LEVELS, type=str.upper)
    p.add_argument("--log-format", default="text", choices=logs.FORMATS)
    return p.parse_args(argv)


def remoting_listen(args: argparse.Namespace) -> str | None:
    """Where 4.x clients connect: the flag, else 10911 on the gRPC host with NameServers,
    else nowhere (a lone embedded broker stays as it was)."""
    value = args.remoting_listen
    if value is not None:
        return None if value.strip().lower() == "off" else value
    if not args.namesrv:
        return None
    from broker_core.remoting_broker.frontend import DEFAULT_REMOTING_PORT

    host = args.listen.rpartition(":")[0] or "127.0.0.1"
    return f"{host}:{DEFAULT_REMOTING_PORT}"


def cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
    """The cluster settings, or None for a lone broker (ConfigError for cluster flags
    without --namesrv)."""
    given = {
        "--cluster": args.cluster,
        "--register-interval-ms": args.register_interval_ms,
        "--route-ttl-ms": args.route_ttl_ms,
    }
    if not args.namesrv:
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise ConfigError(f"{', '.join(stray)} need(s) --namesrv")
        return None
    from broker_core.server.cluster_member import ClusterOptions

    options = ClusterOptions(args.namesrv)
    if args.cluster is not None:
        options = dataclasses.replace(options, cluster=args.cluster)
    for name in ("register_interval_ms", "route_ttl_ms"):
        value = getattr(args, name)
        if value is not None:
            if value < 10:
                raise ConfigError(f"--{name.replace('_', '-')} must be ≥ 10, got {value}")
            options = dataclasses.replace(options, **{name: value})
    return options


def _add_group_args(p: argparse.ArgumentParser) -> None:
    """Broker-group flags (``broker_core.ha``); each overrides its ``[broker]`` key."""
    p.add_argument("--broker-id", type=int, default=None, help="0 = master, > 0 = slave")
    p.add_argument("--ha-listen", default=None, help="master: HOST:PORT for its slaves")
    p.add_argument("--ha-master", default=None, help="slave: the master's HA HOST:PORT")
    p.add_argument(
        "--replication",
        choices=("sync", "async"),
        default=None,
        help="sync: a send is acked once the in-sync slaves have it",
    )
    p.add_argument(
        "--controller",
        default=None,
        help="etcd http://HOST:PORT[,…]: the group elects its master (roles "
        "from --broker-id/--ha-master are then ignored)",
    )


def group_overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = ("broker_id", "ha_listen", "ha_master", "replication")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}
