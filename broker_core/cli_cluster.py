"""``rmq`` verbs across a cluster: ``cluster list|up``, ``topic route``, and the
``--namesrv`` forms of ``topic create`` and ``group progress``.

Every verb here asks the NameServers (``--namesrv HOST:PORT[;HOST:PORT]``, or
``$RMQ_NAMESRV``) which broker groups exist and then talks to each group's master over
gRPC. A broker group that cannot be reached is reported by name; the others still
answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from broker_core.cli_base import broker_client
from broker_core.errors import InvalidArgumentError, NotFoundError, RocketMQError

if TYPE_CHECKING:
    from broker_core.namesrv.client import ClusterInfo

log = logging.getLogger(__name__)
ROUTE_WAIT_S = 5.0
MEMBERS_WAIT_S = 15.0  # > a slave's table copy interval (2 s) under load
Table = Callable[[str, list[str], list[tuple[Any, ...]]], None]


def namesrv_option(required: bool) -> Callable[[Any], Any]:
    return click.option(
        "--namesrv",
        envvar="RMQ_NAMESRV",
        required=required,
        default=None,
        help="NameServers HOST:PORT[;HOST:PORT]",
    )


def cluster_info(namesrv: str) -> ClusterInfo:
    from broker_core.namesrv.client import NameServerClient

    client = NameServerClient(namesrv)
    try:
        return client.get_cluster_info()
    finally:
        client.close()


def broker_addrs(namesrv: str, only: str | None = None) -> dict[str, str]:
    """Broker group name -> master gRPC address (InvalidArgumentError for an unknown
    ``only`` or an empty cluster)."""
    from broker_core.cluster.routes import master_grpc_addr

    info = cluster_info(namesrv)
    addrs = {
        name: addr
        for name, data in sorted(info.brokers.items())
        if (addr := master_grpc_addr(data))
    }
    if only is not None:
        if only not in addrs:
            raise InvalidArgumentError(
                f"no live broker named {only!r} in the cluster "
                f"(known: {', '.join(addrs) or 'none'})"
            )
        return {only: addrs[only]}
    if not addrs:
        raise InvalidArgumentError(f"the NameServers at {namesrv} list no live broker")
    return addrs


def create_topic_everywhere(
    namesrv: str, only: str | None, name: str, **settings: Any
) -> list[tuple[str, dict[str, Any]]]:
    """Create (or update) topic ``name`` on every broker group, or on ``only``; returns
    (broker, config) per group once the NameServers' route lists every one of them (each
    broker registers a topic change at once) and every live member of those groups knows
    the topic. A group that fails raises its error, naming it; a route or a member that
    does not show it in time is only logged (the next registration or copy brings it)."""
    done = []
    for broker, addr in broker_addrs(namesrv, only).items():
        with broker_client(addr, timeout_s=10.0, max_attempts=2) as client:
            try:
                done.append((broker, client.create_topic(name, **settings)))
            except RocketMQError as exc:
                raise type(exc)(f"broker {broker} ({addr}): {exc}") from exc
    _wait_for_route(namesrv, name, {broker for broker, _ in done})
    _wait_for_members(namesrv, name, {broker for broker, _ in done})
    return done


def _wait_for_members(namesrv: str, topic: str, groups: set[str]) -> bool:
    """True once every live broker of ``groups`` — slaves too, which copy the master's
    topic table every few seconds — knows ``topic``: a client that dials a slave's
    endpoint and asks it for the route right after a create gets it (issue 30)."""
    addrs = [b.grpc_addr for b in cluster_info(namesrv).live if b.broker_name in groups]
    deadline = time.monotonic() + MEMBERS_WAIT_S
    waiting = [a for a in addrs if a]
    while waiting:
        waiting = [addr for addr in waiting if not _knows_topic(addr, topic)]
        if waiting and time.monotonic() > deadline:
            log.warning("brokers %s do not know topic %s yet", waiting, topic)
            return False
        if waiting:
            time.sleep(0.1)
    return True


def _knows_topic(addr: str, topic: str) -> bool:
    try:
        with broker_client(addr, timeout_s=5.0, max_attempts=1) as client:
            return any(t["name"] == topic for t in client.list_topics())
    except RocketMQError:
        return False


def _wait_for_route(namesrv: str, topic: str, brokers: set[str]) -> bool:
    """True once the NameServers route ``topic`` to every group of ``brokers``."""
    from broker_core.namesrv.client import NameServerClient

    client = NameServerClient(namesrv)
    deadline = time.monotonic() + ROUTE_WAIT_S
    try:
        while True:
            try:
                listed = {q.broker_name for q in client.get_route(topic).queue_datas}
            except NotFoundError:
                listed = set()
            if brokers <= listed:
                return True
            if time.monotonic() > deadline:
                log.warning(
                    "the route of %s lists %s, not yet %s", topic, sorted(listed), sorted(brokers)
                )
                return False
            time.sleep(0.05)
    finally:
        client.close()


def progress_everywhere(namesrv: str, group: str, topic: str | None) -> list[tuple[Any, ...]]:
    """(broker, topic, queue, broker offset, consumer offset, lag) rows of every group."""
    rows: list[tuple[Any, ...]] = []
    for broker, addr in broker_addrs(namesrv).items():
        with broker_client(addr, timeout_s=10.0, max_attempts=2) as client:
            try:
                progress = client.group_progress(group, topic)
            except NotFoundError:
                continue  # this group or topic does not live on that broker
        rows += [
            (broker, r["topic"], r["queue_id"], r["broker_offset"], r["consumer_offset"], r["lag"])
            for r in progress["queues"]
        ]
    if not rows:
        raise NotFoundError(f"group {group!r} has no progress on any broker of the cluster")
    return rows


def put_tps(grpc_addr: str) -> str:
    """A broker's messages stored per second over the last 10 s ("-" if it does not answer)."""
    try:
        with broker_client(grpc_addr, timeout_s=3.0, max_attempts=1) as client:
            return f"{client.health()['put_tps']:.1f}"
    except (RocketMQError, KeyError):
        return "-"


def _port_option(flag: str, default: int, text: str) -> Callable[[Any], Any]:
    return click.option(
        flag,
        type=click.IntRange(0, 65535),
        default=default,
        show_default=True,
        help=f"{text}; taken: a free one; 0: any free one",
    )


def install(cli: click.Group, topic: click.Group, table: Table, iso: Callable[[int], str]) -> None:
    """Add the cluster verbs to the ``rmq`` groups."""

    @cli.group("cluster")
    def cluster() -> None:
        """List a cluster's brokers, or run a local one."""

    @cluster.command("list")
    @namesrv_option(required=True)
    def cluster_list(namesrv: str) -> None:
        """Brokers the NameServers know: name and id (0 = master), addresses, last
        heartbeat (UTC) and put TPS; fits 80 columns."""
        info = cluster_info(namesrv)
        live = sorted(info.live, key=lambda b: (b.cluster, b.broker_name, b.broker_id))
        clusters = sorted({b.cluster for b in live})
        many = len(clusters) > 1  # one cluster: named in the title, no column
        rows = [
            (
                *((b.cluster,) if many else ()),
                b.broker_name,
                b.broker_id,
                b.broker_addr,
                b.grpc_addr,
                iso(b.last_update_ms)[11:19],
                put_tps(b.grpc_addr),
            )
            for b in live
        ]
        columns = ["broker", "id", "address", "grpc", "heartbeat", "put TPS"]
        title = "clusters" if many else f"cluster {''.join(clusters)}"
        table(title, (["cluster"] if many else []) + columns, rows)

    @cluster.command("up")
    @click.option(
        "--brokers",
        "count",
        type=click.IntRange(1, 26),
        default=2,
        show_default=True,
        help="broker groups to start (broker-a, broker-b, …)",
    )
    @click.option("--dir", "directory", required=True, help="stores and logs go here")
    @click.option(
        "--register-interval-ms",
        type=click.IntRange(10),
        default=30_000,
        show_default=True,
        help="how often each broker re-registers",
    )
    @click.option(
        "--replicas",
        type=click.IntRange(1, 9),
        default=1,
        show_default=True,
        help="brokers per group (sync replication)",
    )
    @click.option(
        "--controller",
        is_flag=True,
        help="also start etcd; each group elects its master (needs etcd installed)",
    )
    @click.option(
        "--tls", is_flag=True, help="serve TLS everywhere with a throwaway CA (its path is printed)"
    )
    @click.option("--restart", is_flag=True, help="start a broker that exits again")
    @_port_option("--namesrv-port", 9876, "the NameServer's port")
    @_port_option("--grpc-port", 8081, "the first broker's gRPC port (the next: +1, +2, …)")
    @_port_option("--remoting-port", 10911, "the first broker's 4.x remoting port (likewise)")
    @_port_option("--etcd-port", 2379, "etcd's client port (with --controller)")
    def cluster_up(directory: str, **options: Any) -> None:
        """Run a NameServer and N broker groups on loopback until Ctrl-C/SIGTERM.

        A broker that dies is reported (and started again with --restart); the others keep
        serving. Ports are the ones asked for when free, else free ones (0: any free port);
        the endpoints go to DIR/endpoints.json and DIR/env (`. DIR/env` points `rmq` at the
        cluster). Every broker serves Prometheus metrics on a free port."""
        from broker_core.cluster.up import run_up

        try:
            run_up(Path(directory), **options)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo("stopped")

    @topic.command("route")
    @click.argument("name")
    @namesrv_option(required=True)
    def topic_route(name: str, namesrv: str) -> None:
        """Which broker groups hold topic NAME, with their queues."""
        from broker_core.cluster.routes import master_grpc_addr
        from broker_core.namesrv.client import NameServerClient

        client = NameServerClient(namesrv)
        try:
            route = client.get_route(name)
        finally:
            client.close()
        addrs = {b.broker_name: master_grpc_addr(b) or "" for b in route.broker_datas}
        table(
            f"topic {name}",
            ["broker", "grpc", "read queues", "write queues", "perm"],
            [
                (
                    q.broker_name,
                    addrs.get(q.broker_name, ""),
                    q.read_queue_nums,
                    q.write_queue_nums,
                    q.perm,
                )
                for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
            ],
        )
