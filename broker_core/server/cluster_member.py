"""A broker's membership in a cluster: registration, cached routes, forwarding.

Built by ``assembly.build`` when the broker is started with ``--namesrv``; absent otherwise
(a broker without NameServers behaves exactly as a lone broker always has). Life cycle:
``check()`` before the gRPC server starts (a name clash stops the start), ``start()``
once it serves (first registration, then the heartbeat thread), ``stop()`` before the
server stops (unregister first, so routes stop naming this broker while it drains).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_core.broker.broker import Broker
from broker_core.cluster.forward import Forwarder
from broker_core.cluster.registration import (
    DEFAULT_CLUSTER,
    DEFAULT_REGISTER_INTERVAL_MS,
    BrokerIdentity,
    RegistrationService,
)
from broker_core.cluster.routes import DEFAULT_ROUTE_TTL_MS, ClusterRoutes
from broker_core.errors import ConfigError
from broker_core.namesrv.client import NameServerClient
from broker_core.server.context import ServerContext

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True)
class ClusterOptions:
    """The command line's cluster settings."""

    namesrv: str
    cluster: str = DEFAULT_CLUSTER
    register_interval_ms: int = DEFAULT_REGISTER_INTERVAL_MS
    route_ttl_ms: int = DEFAULT_ROUTE_TTL_MS


class ClusterMember:
    """Registration plus routes plus forwarder of one broker; see the module docstring."""

    def __init__(
        self,
        broker: Broker,
        ctx: ServerContext,
        options: ClusterOptions,
        *,
        remoting_addr: str = "",
    ) -> None:
        """ConfigError when the broker would register an address nobody can dial.

        ``remoting_addr`` (the 4.x listener, "" without one) is registered as
        ``brokerAddr``; on a wildcard host it takes the advertised host instead.
        """
        if ctx.host.strip("[]") in WILDCARD_HOSTS:
            raise ConfigError(
                f"a cluster member must register an address other brokers and clients can "
                f"reach, not {ctx.endpoint}: give --advertise HOST:PORT with --namesrv"
            )
        host, _, port = remoting_addr.rpartition(":")
        if remoting_addr and host.strip("[]") in WILDCARD_HOSTS:
            remoting_addr = f"{ctx.host}:{port}"
        identity = BrokerIdentity(
            options.cluster,
            ctx.broker_name,
            ctx.endpoint,
            broker_id=broker.config.broker_id,  # 0 = master
            remoting_addr=remoting_addr,
        )
        self.registration = RegistrationService(
            broker, identity, options.namesrv, interval_ms=options.register_interval_ms
        )
        self.routes = ClusterRoutes(NameServerClient(options.namesrv), ttl_ms=options.route_ttl_ms)
        self.forwarder = Forwarder(self.routes, ctx.broker_name)
        ctx.routes, ctx.forwarder = self.routes, self.forwarder
        broker.topics.add_listener(self.routes.invalidate)

    def check(self) -> None:
        """ConfigError if another live broker already has this broker's name."""
        self.registration.check_name_free()

    def start(self) -> None:
        """Register now and keep registering."""
        self.registration.start()

    def stop(self) -> None:
        """Unregister, then close every connection to NameServers and brokers."""
        self.registration.stop()
        self.forwarder.close()
        self.routes.close()
