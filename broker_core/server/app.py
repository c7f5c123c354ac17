"""The broker process: a gRPC server over one ``Broker``, with graceful shutdown.

``BrokerServer`` owns the gRPC server (a thread-pool server; see docs/ARCHITECTURE.md for
why) and the broker. ``run(...)`` is the process entry point used by ``rmq broker start``
and ``python -m broker_core.server``: it prints one line ``READY <endpoint>`` once it
accepts requests, and on SIGTERM or SIGINT stops accepting, lets in-flight calls finish
(up to the grace period), then flushes and closes the store. With ``--namesrv`` the broker
joins a cluster (``cluster_member.py``): it registers with every NameServer, answers
routes for the whole cluster, and unregisters before it stops. With ``--no-extensions``
(config ``grpc_extensions = false``) only ``apache.rocketmq.v2`` and gRPC health are
served, so the broker looks like any RocketMQ 5 gRPC endpoint (proxy).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_core.address import parse_host_port
from broker_core.auth.authority import Authority
from broker_core.auth.config import TlsConfig, load_security
from broker_core.auth.install import install_auth
from broker_core.auth.tls import server_credentials
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig, StoreConfig, load_config
from broker_core.errors import ConfigError, ListenError, ServerError, StoreError
from broker_core.metrics import logs
from broker_core.metrics.install import install_metrics
from broker_core.server import sessions
from broker_core.server.admin import admin_handler
from broker_core.server.bulk import bulk_handler
from broker_core.server.context import ServerContext
from broker_core.server.gate import Gate
from broker_core.server.health import HealthReporter
from broker_core.server.service import MessagingService

if TYPE_CHECKING:  # cluster code loads only for a broker started with --namesrv
    from broker_core.ha.controller import ControllerAgent
    from broker_core.remoting_broker.frontend import RemotingFrontEnd
    from broker_core.server.cluster_member import ClusterMember, ClusterOptions

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 256 << 20  # a batch of large messages; the store enforces body limits


class BrokerServer:
    """gRPC front end plus the broker it serves."""

    def __init__(
        self,
        broker: Broker,
        listen: str,
        *,
        advertise: str | None = None,
        max_workers: int = 128,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self.broker = broker
        self.gate = Gate()  # refuses calls until the broker is up; auth and metrics hook here
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=[self.gate],
        )
        host, _ = parse_host_port(
            listen, what="listen address", allow_any_port=True, allow_empty_host=True
        )
        try:
            self.port = (
                self._server.add_secure_port(listen, credentials)
                if credentials
                else self._server.add_insecure_port(listen)
            )
        except RuntimeError:  # gRPC: "Failed to bind to address" (unresolvable host)
            self.port = 0
        if self.port == 0:
            raise ListenError(f"cannot listen on {listen}: the address is in use or not local")
        host = host or "127.0.0.1"
        self.endpoint = advertise or f"{host}:{self.port}"
        self.controller: ControllerAgent | None = None  # controller mode (--controller)
        self.ctx = ServerContext(broker, self.endpoint, broker.config.broker_name)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingService(self.ctx), self._server
        )
        sessions.install_transaction_checker(self.ctx)
        self.cluster: ClusterMember | None = None
        self.remoting: RemotingFrontEnd | None = None
        self.authority: Authority | None = None  # install_auth sets it when [auth] is on

        self.health = HealthReporter(broker)
        self.health.add_to(self._server)
        self.on_stop: list[Callable[[], None]] = []  # e.g. the metrics HTTP server's shutdown
        self.metrics_endpoint: str | None = None

    def add_remoting(
        self, listen: str, *, any_port_if_taken: bool = False, tls: TlsConfig | None = None
    ) -> None:
        """Serve 4.x remoting clients on ``listen`` too (before ``join_cluster``/``start``);
        binds now, so the registered ``brokerAddr`` is the real port. With
        ``any_port_if_taken`` (the default port, not one the operator asked for) a taken
        port falls back to a free one: clients find it through the NameServer. With ``tls``
        (the broker's ``[tls]``) the listener serves TLS only. With ``[auth]`` on (call
        ``install_auth`` first) every request must be signed and allowed (``access.py``)."""
        from broker_core.remoting.tls import server_context
        from broker_core.remoting_broker.frontend import RemotingFrontEnd

        context = server_context(tls) if tls is not None else None
        self.remoting = RemotingFrontEnd(
            self.broker,
            listen,
            broker_name=self.ctx.broker_name,
            ssl_context=context,
            authority=self.authority,
        )
        try:
            self.remoting.start()
        except OSError as exc:
            if not any_port_if_taken:
                raise ConfigError(f"--remoting-listen {listen}: {exc}") from None
            host = listen.rpartition(":")[0]
            log.warning("remoting port %s taken (%s); using a free port", listen, exc)
            self.remoting = RemotingFrontEnd(
                self.broker,
                f"{host}:0",
                ssl_context=context,
                broker_name=self.ctx.broker_name,
                authority=self.authority,
            )
            self.remoting.start()

    def join_cluster(self, options: ClusterOptions) -> None:
        """Become a member of the NameServers' cluster (before ``start``)."""
        from broker_core.server.cluster_member import ClusterMember

        remoting = self.remoting.address if self.remoting is not None else ""
        self.cluster = ClusterMember(self.broker, self.ctx, options, remoting_addr=remoting)

    def add_generic_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """Register more services (the admin service) before ``start``."""
        self._server.add_generic_rpc_handlers(tuple(handlers))

    def start(self) -> None:
        """Listen first (health answers NOT_SERVING, other calls UNAVAILABLE), then recover
        the store and start the broker, then open the gate and report SERVING; with a
        cluster, refuse a clashing name first and register once serving."""
        if self.cluster is not None:
            self.cluster.check()
        self._server.start()
        try:
            self.broker.start()
        except BaseException:
            self._server.stop(0)
            raise
        self.gate.open()
        self.health.start()
        if self.cluster is not None:
            self.cluster.start()

    def stop(self, grace_s: float = 10.0) -> None:
        """Refuse new calls, let running ones finish for ``grace_s``, then close the broker.

        Telemetry streams stay open as long as clients live, so they are closed right
        away instead of holding shutdown for the whole grace period. A cluster member
        unregisters first, so routes stop naming it while it drains.
        """
        self.health.shutdown()
        if self.cluster is not None:
            self.cluster.stop()
        if self.remoting is not None:
            self.remoting.stop()
        done = self._server.stop(grace_s)
        sessions.close_all(self.ctx)
        if not done.wait(grace_s + 5):  # the store must close even if a call never ends
            log.warning(
                "gRPC server did not stop within %.0f s; closing the store anyway", grace_s + 5
            )
        self.broker.stop()
        for hook in self.on_stop:
            hook()


def _raise_open_files_limit() -> None:
    """Lift the soft open-files limit to the hard one: every mapped segment and queue file
    holds a descriptor (``mmap`` keeps its own), so a big store outgrows the usual 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard and hard != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m broker_core.server", description=__doc__)
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


def _remoting_listen(args: argparse.Namespace) -> str | None:
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


def _cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
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


def _group_overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = ("broker_id", "ha_listen", "ha_master", "replication")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def build(args: argparse.Namespace) -> BrokerServer:
    overrides: dict[str, Any] = {"store_dir": args.store_dir}
    if args.flush:
        overrides["flush_mode"] = args.flush
    host, port = parse_host_port(
        args.listen, what="--listen", allow_any_port=True, allow_empty_host=True
    )
    if args.advertise is not None:
        host, port = parse_host_port(args.advertise, what="--advertise")
    if port > 0:  # stored messages record where they were stored
        overrides.update(store_host=host or "127.0.0.1", store_port=port)
    broker_config, store_config = load_config(args.config, **overrides)
    broker_config = dataclasses.replace(broker_config, **_group_overrides(args))
    if args.no_extensions:
        broker_config = dataclasses.replace(broker_config, grpc_extensions=False)
    cluster = _cluster_options(args)
    name = args.broker_name
    if name is None and cluster is not None and broker_config.broker_name == "broker-a":
        from broker_core.cluster.registration import default_broker_name

        name = default_broker_name(args.store_dir)  # unique: two brokers never share it
    if name is not None:
        broker_config = dataclasses.replace(broker_config, broker_name=name)
    store_dir = Path(store_config.store_dir)
    if store_dir.exists() and not store_dir.is_dir():
        raise StoreError(f"cannot open the store: {store_dir} is a file, not a directory")
    agent = None
    if args.controller:
        broker_config, agent = _join_controller(args.controller, broker_config, store_config)
    try:
        broker = Broker(broker_config, store_config)
    except OSError as exc:
        raise StoreError(f"cannot open the store at {store_dir}: {exc}") from exc
    auth_config, tls = load_security(args.config)
    server = BrokerServer(
        broker,
        args.listen,
        advertise=args.advertise,
        credentials=server_credentials(tls) if tls else None,
    )
    install_auth(server, auth_config)  # before the admin handler: adds the user/ACL verbs
    server.controller = agent
    remoting = _remoting_listen(args)
    if remoting is not None:
        server.add_remoting(remoting, any_port_if_taken=args.remoting_listen is None, tls=tls)
    if cluster is not None:
        server.join_cluster(cluster)
    if broker_config.grpc_extensions:  # off: clients see UNIMPLEMENTED and use v2 RPCs only
        server.add_generic_handlers([admin_handler(server.ctx), bulk_handler(server.ctx)])
    if args.metrics_listen:
        install_metrics(server, args.metrics_listen)
    return server


def _join_controller(
    urls: str, broker_config: BrokerConfig, store_config: StoreConfig
) -> tuple[BrokerConfig, ControllerAgent]:
    """Controller mode: the role comes from etcd (``broker_core.ha.controller``)."""
    from broker_core.ha.controller import ControllerAgent

    agent = ControllerAgent(urls, broker_config.broker_name, str(store_config.store_dir))
    role = agent.join()
    broker_config = dataclasses.replace(
        broker_config,
        broker_id=role.broker_id,
        ha_master=role.ha_master,
        ha_listen=broker_config.ha_listen or "127.0.0.1:0",
    )
    return broker_config, agent


def _restart(argv: Sequence[str] | None, reason: str) -> None:
    """Run this broker again in this process (same pid): its next join applies the role."""
    log.warning("restarting the broker: %s", reason)
    args = list(argv) if argv is not None else sys.argv[1:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "broker_core.server", *args])


def _register_as_master(server: BrokerServer) -> None:
    """After a promotion in place: tell the NameServers this broker is now id 0."""
    if server.cluster is not None:
        reg = server.cluster.registration
        reg.identity = dataclasses.replace(reg.identity, broker_id=0)
        reg.register_now()


def _say(line: str) -> None:
    """One stdout line in one write: a log line from another thread (stderr, often the same
    pipe) cannot land inside it, as it could between print()'s text and its newline."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _tune_garbage_collector() -> None:
    """Keep the cyclic collector off the send path.

    Every request allocates thousands of short-lived objects, and with the default
    thresholds a young collection ran every 700 allocations and a full one, walking every
    object the broker holds, every few hundred requests: about 10 % of a batch send.
    What exists at start-up is frozen out of the collector's view, and young collections
    wait for 50,000 allocations (acyclic garbage is freed at once by reference counting
    either way; the collector only finds cycles).
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def run(argv: Sequence[str] | None = None) -> int:
    """Start a broker and block until SIGTERM/SIGINT; returns the exit code."""
    args = parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    server = build(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
    except OSError as exc:
        raise StoreError(
            f"cannot open the store at {server.broker.store_config.store_dir}: {exc}"
        ) from exc
    _raise_open_files_limit()
    _tune_garbage_collector()
    recovery = server.broker.recovery
    if recovery is not None:
        log.info("store opened: %s", recovery.summary())
    ha_endpoint = server.broker.replication.ha_endpoint
    if ha_endpoint:
        _say(f"HA_LISTEN {ha_endpoint}")
    if server.remoting is not None:
        log.info("remoting (4.x clients) on %s", server.remoting.address)
    if server.metrics_endpoint:
        _say(f"METRICS http://{server.metrics_endpoint}/metrics")
    agent = server.controller
    if agent is not None:
        agent.on_promoted = lambda: _register_as_master(server)
        agent.attach(server.broker, server.endpoint)
        server.ctx.master_endpoint = lambda: agent.master_endpoint
    _say(f"READY {server.endpoint}")
    # A signal may land on a gRPC thread; CPython runs its handler only when the main
    # thread runs, so wait in slices instead of blocking until an event nobody sets.
    while not stop.wait(0.1):
        if agent is not None and agent.restart.is_set():
            break
    log.info("shutting down")
    leaving = agent is not None and agent.restart.is_set() and not stop.is_set()
    try:
        server.stop(grace_s=1.0 if leaving else 10.0)  # a role change fails calls in flight
    except Exception as exc:
        log.exception("error while stopping")
        raise ServerError(f"error while stopping the broker: {exc}") from exc
    log.info("stopped cleanly")
    if agent is not None:
        agent.stop()
        if agent.restart.is_set() and not stop.is_set():
            _restart(argv, agent.restart_reason)
    return 0


if __name__ == "__main__":
    sys.exit(run())
