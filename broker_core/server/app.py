"""The broker's gRPC server: a thread-pool gRPC server over one ``Broker``.

``BrokerServer`` owns the gRPC server (a thread-pool server; see docs/ARCHITECTURE.md for
why) and the broker. What is plugged in (users and ACLs, request signing, metrics, the
admin and bulk services, controller mode) comes in one ``Plugins`` value at construction,
built by the composition root ``assembly.py``; nothing sets fields on a server from
outside. ``start`` listens first (health answers NOT_SERVING), recovers the store, then
opens the gate; ``stop`` stops accepting, lets in-flight calls finish (up to the grace
period), then flushes and closes the store. With ``join_cluster`` (``--namesrv``) the
broker registers with every NameServer and unregisters before it stops. The process
around it (flags, signals, restarts) is ``main.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_core.address import parse_host_port
from broker_core.auth.authority import Authority
from broker_core.auth.config import TlsConfig
from broker_core.auth.store import AuthStore
from broker_core.broker.broker import Broker
from broker_core.errors import ConfigError, ListenError
from broker_core.metrics.recorder import Recorder
from broker_core.server import sessions
from broker_core.server.context import ServerContext
from broker_core.server.gate import Gate, Wrapper
from broker_core.server.health import HealthReporter
from broker_core.server.service import MessagingService

if TYPE_CHECKING:  # cluster code loads only for a broker started with --namesrv
    from broker_core.remoting_broker.frontend import RemotingFrontEnd
    from broker_core.server.cluster_member import ClusterMember, ClusterOptions

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 256 << 20  # a batch of large messages; the store enforces body limits


@dataclass(frozen=True, slots=True)
class Plugins:
    """What the composition root (``assembly.py``) plugs into one server; all optional."""

    auth: AuthStore | None = None  # the user/ACL table the admin verbs manage
    authority: Authority | None = None  # set: every call (gRPC, remoting) is signed and checked
    wrappers: tuple[Wrapper, ...] = ()  # per-call wrappers, in order (``gate.py``)
    services: tuple[Callable[[ServerContext], grpc.GenericRpcHandler], ...] = ()  # admin, bulk
    metrics: Recorder | None = None  # hot-path counters (``--metrics-listen``)
    metrics_endpoint: str | None = None  # where ``/metrics`` is served
    master_endpoint: Callable[[], str] | None = None  # controller mode: the master's gRPC
    on_stop: tuple[Callable[[], None], ...] = ()  # after the broker stopped (metrics HTTP)


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
        plugins: Plugins = Plugins(),
    ) -> None:
        self.broker = broker
        self.plugins = plugins
        self.gate = Gate(plugins.wrappers)  # refuses calls until the broker is up
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
        self.ctx = ServerContext(
            broker,
            self.endpoint,
            broker.config.broker_name,
            metrics=plugins.metrics,
            auth=plugins.auth,
            master_endpoint=plugins.master_endpoint,
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingService(self.ctx), self._server
        )
        self._server.add_generic_rpc_handlers(tuple(make(self.ctx) for make in plugins.services))
        sessions.install_transaction_checker(self.ctx)
        self.cluster: ClusterMember | None = None
        self.remoting: RemotingFrontEnd | None = None
        self.health = HealthReporter(broker)
        self.health.add_to(self._server)

    def add_remoting(
        self, listen: str, *, any_port_if_taken: bool = False, tls: TlsConfig | None = None
    ) -> None:
        """Serve 4.x remoting clients on ``listen`` too (before ``join_cluster``/``start``);
        binds now, so the registered ``brokerAddr`` is the real port. With
        ``any_port_if_taken`` (the default port, not one the operator asked for) a taken
        port falls back to a free one: clients find it through the NameServer. With ``tls``
        (the broker's ``[tls]``) the listener serves TLS only. With ``[auth]`` on
        (``plugins.authority``) every request must be signed and allowed (``access.py``)."""
        from broker_core.remoting.tls import server_context
        from broker_core.remoting_broker.frontend import RemotingFrontEnd

        context = server_context(tls) if tls is not None else None
        self.remoting = RemotingFrontEnd(
            self.broker,
            listen,
            broker_name=self.ctx.broker_name,
            ssl_context=context,
            authority=self.plugins.authority,
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
                authority=self.plugins.authority,
            )
            self.remoting.start()

    def join_cluster(self, options: ClusterOptions) -> None:
        """Become a member of the NameServers' cluster (before ``start``)."""
        from broker_core.server.cluster_member import ClusterMember

        remoting = self.remoting.address if self.remoting is not None else ""
        self.cluster = ClusterMember(self.broker, self.ctx, options, remoting_addr=remoting)

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
        for hook in self.plugins.on_stop:
            hook()
