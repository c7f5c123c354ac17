"""``grpc.health.v1.Health`` on the broker's gRPC port (grpcio-health-checking).

States, for the overall service ``""`` and for ``apache.rocketmq.v2.MessagingService``:

* NOT_SERVING from construction until the store is recovered and every service runs
  (``BrokerServer.start`` listens first, so probes get an answer during recovery);
* SERVING afterwards, as long as no background thread of the broker has died
  (``Broker.service_health``); a watcher re-reads that every ``watch_interval_ms`` and
  flips to NOT_SERVING while one is dead (the admin Health RPC says which and why);
* NOT_SERVING for good once shutdown begins (``enter_graceful_shutdown``).

The health service never needs credentials, so load balancers and orchestrators can
probe a broker with authentication on.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from broker_core.broker.broker import Broker

log = logging.getLogger(__name__)

HEALTH_SERVICE: Final = "grpc.health.v1.Health"
MESSAGING_SERVICE: Final = "apache.rocketmq.v2.MessagingService"
SERVICES: Final = ("", MESSAGING_SERVICE)
SERVING: Final = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthReporter:
    """Owns the health servicer of one server and keeps its states current."""

    def __init__(self, broker: Broker, *, watch_interval_ms: int = 1_000) -> None:
        self.broker = broker
        self.watch_interval_ms = watch_interval_ms
        self.servicer = health.HealthServicer()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: int | None = None
        self._set(NOT_SERVING)

    def add_to(self, server: grpc.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    def _set(self, state: int) -> None:
        if state == self._state or self._stop.is_set():
            return
        self._state = state
        for name in SERVICES:
            self.servicer.set(name, state)

    def failed_services(self) -> dict[str, str]:
        """The broker's background services whose thread died ("failed: …"), with their
        state. A round that failed and is retried ("error: …") and a service a slave does
        not run ("stopped") leave the broker serving; admin Health shows them all."""
        return {
            name: state
            for name, state in self.broker.service_health().items()
            if state.startswith("failed")
        }

    def refresh(self) -> None:
        """SERVING unless a background service failed (then NOT_SERVING, logged once)."""
        failed = self.failed_services()
        if failed and self._state != NOT_SERVING:
            log.error("health: NOT_SERVING, failed background service(s): %s", failed)
        elif not failed and self._state == NOT_SERVING:
            log.info("health: SERVING")
        self._set(NOT_SERVING if failed else SERVING)

    def start(self) -> None:
        """The broker is up: report it and watch its services until ``shutdown``."""
        self.refresh()
        self._thread = threading.Thread(target=self._watch, name="health-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_interval_ms / 1000):
            try:
                self.refresh()
            except Exception:  # never let the watcher die silently with a stale state
                log.exception("health: reading service states failed")
                self._set(NOT_SERVING)

    def shutdown(self) -> None:
        """NOT_SERVING from now on (idempotent)."""
        self._set(NOT_SERVING)
        self._stop.set()
        self.servicer.enter_graceful_shutdown()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
