"""The broker process: a gRPC server over one ``Broker``, with graceful shutdown.

``BrokerServer`` owns the gRPC server (a thread-pool server; see docs/ARCHITECTURE.md for
why) and the broker. ``run(...)`` is the process entry point used by ``rmq broker start``
and ``python -m broker_core.server``: it prints one line ``READY <endpoint>`` once it
accepts requests, and on SIGTERM or SIGINT stops accepting, lets in-flight calls finish
(up to the grace period), then flushes and closes the store.
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_core.auth.config import load_security
from broker_core.auth.install import install_auth
from broker_core.auth.tls import server_credentials
from broker_core.broker.broker import Broker
from broker_core.config import load_config
from broker_core.metrics import logs
from broker_core.metrics.install import install_metrics
from broker_core.server import sessions
from broker_core.server.admin import admin_handler
from broker_core.server.context import ServerContext
from broker_core.server.gate import Gate
from broker_core.server.health import HealthReporter
from broker_core.server.raw_pull import bulk_handler
from broker_core.server.service import MessagingService

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 256 << 20  # a batch of large messages; the store enforces body limits


class BrokerServer:
    """gRPC front end plus the broker it serves."""

    def __init__(self, broker: Broker, listen: str, *, advertise: str | None = None,
                 max_workers: int = 128,
                 credentials: grpc.ServerCredentials | None = None) -> None:  # fmt: skip
        self.broker = broker
        self.gate = Gate()  # refuses calls until the broker is up; auth and metrics hook here
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.so_reuseport", 0)],
            interceptors=[self.gate],
        )  # fmt: skip
        self.port = (self._server.add_secure_port(listen, credentials) if credentials
                     else self._server.add_insecure_port(listen))  # fmt: skip
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        host = listen.rpartition(":")[0] or "127.0.0.1"
        self.endpoint = advertise or f"{host}:{self.port}"
        self.ctx = ServerContext(broker, self.endpoint, broker.config.broker_name)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(
            MessagingService(self.ctx), self._server
        )
        sessions.install_transaction_checker(self.ctx)
        self.health = HealthReporter(broker)
        self.health.add_to(self._server)
        self.on_stop: list[Callable[[], None]] = []  # e.g. the metrics HTTP server's shutdown
        self.metrics_endpoint: str | None = None

    def add_generic_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """Register more services (the admin service) before ``start``."""
        self._server.add_generic_rpc_handlers(tuple(handlers))

    def start(self) -> None:
        """Listen first (health answers NOT_SERVING, other calls UNAVAILABLE), then recover
        the store and start the broker, then open the gate and report SERVING."""
        self._server.start()
        try:
            self.broker.start()
        except BaseException:
            self._server.stop(0)
            raise
        self.gate.open()
        self.health.start()

    def stop(self, grace_s: float = 10.0) -> None:
        """Refuse new calls, let running ones finish for ``grace_s``, then close the broker.

        Telemetry streams stay open as long as clients live, so they are closed right
        away instead of holding shutdown for the whole grace period.
        """
        self.health.shutdown()
        done = self._server.stop(grace_s)
        sessions.close_all(self.ctx)
        if not done.wait(grace_s + 5):  # the store must close even if a call never ends
            log.warning("gRPC server did not stop within %.0f s; closing the store anyway",
                        grace_s + 5)  # fmt: skip
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
    p.add_argument("--store-dir", default=".rocketmq/store")
    p.add_argument("--flush", choices=("sync", "async"), default=None)
    p.add_argument("--config", default=None, help="TOML file with [broker] and [store]")
    p.add_argument("--metrics-listen", default=None,
                   help="serve Prometheus metrics on HOST:PORT/metrics (off by default)")
    p.add_argument("--log-level", default="INFO", choices=logs.LEVELS, type=str.upper)
    p.add_argument("--log-format", default="text", choices=logs.FORMATS)
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> BrokerServer:
    overrides: dict[str, Any] = {"store_dir": args.store_dir}
    if args.flush:
        overrides["flush_mode"] = args.flush
    host, _, port = (args.advertise or args.listen).rpartition(":")
    if port.isdigit() and int(port) > 0:  # stored messages record where they were stored
        overrides.update(store_host=host or "127.0.0.1", store_port=int(port))
    broker_config, store_config = load_config(args.config, **overrides)
    auth_config, tls = load_security(args.config)
    server = BrokerServer(Broker(broker_config, store_config), args.listen,
                          advertise=args.advertise,
                          credentials=server_credentials(tls) if tls else None)  # fmt: skip
    install_auth(server, auth_config)  # before the admin handler: adds the user/ACL verbs
    server.add_generic_handlers([admin_handler(server.ctx), bulk_handler(server.ctx)])
    if args.metrics_listen:
        install_metrics(server, args.metrics_listen)
    return server


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
    server.start()
    _raise_open_files_limit()
    _tune_garbage_collector()
    recovery = server.broker.recovery
    if recovery is not None:
        log.info("store opened: %s", recovery.summary())
    if server.metrics_endpoint:
        print(f"METRICS http://{server.metrics_endpoint}/metrics", flush=True)
    print(f"READY {server.endpoint}", flush=True)
    # A signal may land on a gRPC thread; CPython runs its handler only when the main
    # thread runs, so wait in slices instead of blocking until an event nobody sets.
    while not stop.wait(0.5):
        pass
    log.info("shutting down")
    server.stop()
    log.info("stopped cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(run())
