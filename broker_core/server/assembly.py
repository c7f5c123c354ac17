"""The composition root: the one place that wires a broker process together.

``build(args)`` turns the command line (``options.py``) and the config file into a
``BrokerServer`` and everything plugged into it, in this order:

1. the config (``[broker]``, ``[store]``, flags over keys), and in controller mode
   (``--controller``) the role etcd assigns (``ha.controller.ControllerAgent.join``),
   before the store opens;
2. the ``Broker`` (it takes the store lock, then builds its ``Replication`` over narrow
   interfaces: ``ha/ports.py``, ``ha/metadata.ConfigTables``);
3. users and ACLs (``[auth]``): the user table, registered with replication so a slave
   re-reads its copy, and with ``[auth] enabled`` the ``Authority`` and the ``Guard``
   wrapper that check every call's signature and rights;
4. metrics (``--metrics-listen``): the recorder, the timing wrapper, the ``/metrics``
   HTTP server (stopped with the server);
5. the admin and bulk services (unless ``grpc_extensions`` is off);
6. the ``BrokerServer`` built with all of that (``app.Plugins``), then the 4.x remoting
   front end and the cluster membership.

``Assembly.start`` starts the server and, in controller mode, attaches the controller to
the running broker (promotion in place, re-registration as broker id 0). Nothing else in
the product imports this module but the process entry (``main.py``); the parts it wires
never import it, or the server, back.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_core.address import parse_host_port
from broker_core.auth.authority import Authority
from broker_core.auth.config import AuthConfig, load_security
from broker_core.auth.store import AUTH_FILE, AuthStore
from broker_core.auth.tls import server_credentials
from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig, StoreConfig, load_config
from broker_core.errors import StoreError
from broker_core.metrics.collector import serve
from broker_core.metrics.recorder import Recorder
from broker_core.metrics.timing import timing_wrapper
from broker_core.server import options
from broker_core.server.admin import admin_handler
from broker_core.server.app import BrokerServer, Plugins
from broker_core.server.bulk import bulk_handler
from broker_core.server.guard import Guard

if TYPE_CHECKING:  # controller code loads only for a broker started with --controller
    from broker_core.ha.controller import ControllerAgent

log = logging.getLogger(__name__)

CLUSTER = "DefaultCluster"  # the metrics' ``cluster`` label (RocketMQ's default name)


@dataclass(frozen=True, slots=True)
class Assembly:
    """A built broker process: the server and, in controller mode, its controller."""

    server: BrokerServer
    controller: ControllerAgent | None = None

    def start(self) -> None:
        """Start the server; in controller mode then hand the controller the running
        broker's replication (it promotes in place and re-registers as broker id 0)."""
        self.server.start()
        agent, server = self.controller, self.server
        if agent is not None:
            agent.attach(
                server.broker.replication,
                server.endpoint,
                promote=server.broker.promote,
                on_promoted=lambda: _register_as_master(server),
            )


def build(args: argparse.Namespace) -> Assembly:
    """Everything ``python -m broker_core.server ARGS`` runs (see the module docstring)."""
    broker_config, store_config = _configs(args)
    agent = None
    if args.controller:
        broker_config, agent = _join_controller(args.controller, broker_config, store_config)
    try:
        broker = Broker(broker_config, store_config)
    except OSError as exc:
        raise StoreError(f"cannot open the store at {store_config.store_dir}: {exc}") from exc
    auth_config, tls = load_security(args.config)
    plugins = _auth(broker, auth_config)
    if args.metrics_listen:
        plugins = _metrics(plugins, broker, args.metrics_listen)
    if broker_config.grpc_extensions:  # off: clients see UNIMPLEMENTED and use v2 RPCs only
        plugins = dataclasses.replace(plugins, services=(admin_handler, bulk_handler))
    if agent is not None:
        controller = agent
        plugins = dataclasses.replace(plugins, master_endpoint=lambda: controller.master_endpoint)
    server = BrokerServer(
        broker,
        args.listen,
        advertise=args.advertise,
        credentials=server_credentials(tls) if tls else None,
        plugins=plugins,
    )
    remoting = options.remoting_listen(args)
    if remoting is not None:
        server.add_remoting(remoting, any_port_if_taken=args.remoting_listen is None, tls=tls)
    cluster = options.cluster_options(args)
    if cluster is not None:
        server.join_cluster(cluster)
    return Assembly(server, agent)


def _configs(args: argparse.Namespace) -> tuple[BrokerConfig, StoreConfig]:
    """The config file's settings with the flags over them."""
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
    broker_config = dataclasses.replace(broker_config, **options.group_overrides(args))
    if args.no_extensions:
        broker_config = dataclasses.replace(broker_config, grpc_extensions=False)
    cluster = options.cluster_options(args)
    name = args.broker_name
    if name is None and cluster is not None and broker_config.broker_name == "broker-a":
        from broker_core.cluster.registration import default_broker_name

        name = default_broker_name(args.store_dir)  # unique: two brokers never share it
    if name is not None:
        broker_config = dataclasses.replace(broker_config, broker_name=name)
    store_dir = Path(store_config.store_dir)
    if store_dir.exists() and not store_dir.is_dir():
        raise StoreError(f"cannot open the store: {store_dir} is a file, not a directory")
    return broker_config, store_config


def _auth(broker: Broker, config: AuthConfig) -> Plugins:
    """Open the user table (config users written in; the broker holds the store lock by
    now) and, when ``config.enabled``, check every call's signature and rights."""
    store = AuthStore(broker.store.config.config_dir / AUTH_FILE)
    if config.users:
        store.bootstrap(config.users)
    broker.replication.on_table_copied(AUTH_FILE, store.reload)  # a slave's copy arrived
    if not config.enabled:
        return Plugins(auth=store)
    authority = Authority(store, config)  # the remoting port checks with it too
    log.info(
        "authentication on: %d user(s), clock skew %d ms, local-time stamps %s",
        len(store.users()),
        config.max_clock_skew_ms,
        "accepted" if config.accept_local_time else "refused",
    )
    return Plugins(auth=store, authority=authority, wrappers=(Guard(authority),))


def _metrics(plugins: Plugins, broker: Broker, listen: str) -> Plugins:
    """Count on the hot paths, time every call and serve ``GET /metrics`` on ``listen``
    (HOST:PORT); the HTTP server stops with the server. OSError if it cannot bind."""
    recorder = Recorder()
    try:
        http = serve(listen, broker, recorder, cluster=CLUSTER)
    except OSError as exc:
        raise OSError(f"--metrics-listen {listen}: {exc}") from exc
    return dataclasses.replace(
        plugins,
        metrics=recorder,
        metrics_endpoint=f"{listen.rpartition(':')[0]}:{http.server_port}",
        wrappers=(*plugins.wrappers, timing_wrapper(recorder)),
        on_stop=(*plugins.on_stop, http.shutdown),
    )


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


def _register_as_master(server: BrokerServer) -> None:
    """After a promotion in place: tell the NameServers this broker is now id 0."""
    if server.cluster is not None:
        reg = server.cluster.registration
        reg.identity = dataclasses.replace(reg.identity, broker_id=0)
        reg.register_now()
