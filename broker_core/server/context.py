"""What every handler gets: the broker, the server's settings and its client sessions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker_core.auth.store import AuthStore
from broker_core.broker.broker import Broker
from broker_core.metrics.recorder import Recorder

if TYPE_CHECKING:
    from broker_core.cluster.forward import Forwarder
    from broker_core.cluster.routes import ClusterRoutes


@dataclass
class ServerContext:
    """Shared by all handlers of one server (thread-safe where noted)."""

    broker: Broker
    endpoint: str  # host:port advertised in routes and assignments
    broker_name: str
    # Telemetry sessions by client id (see handlers/telemetry.py); guarded by ``lock``.
    sessions: dict[str, object] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # With NameServers: the cluster's routes and the forwarder to other brokers (else None).
    routes: ClusterRoutes | None = None
    forwarder: Forwarder | None = None
    # Hot-path counters when metrics are on (``--metrics-listen``), else None.
    metrics: Recorder | None = None
    # Users and ACLs (admin verbs manage them; checked by server/guard.py when auth is on).
    auth: AuthStore | None = None
    # Controller mode: the group master's gRPC endpoint ("" while unknown), else None
    # (a slave forwards sends there: server/master_forward.py).
    master_endpoint: Callable[[], str] | None = None

    @property
    def host(self) -> str:
        return self.endpoint.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.endpoint.rpartition(":")[2])
