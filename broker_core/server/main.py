"""The broker process: ``run(argv)`` is the entry point of ``rmq broker start`` and
``python -m broker_core.server``.

It parses the flags (``options.py``), has the composition root build the server
(``assembly.py``), prints one line ``READY <endpoint>`` once it accepts requests, and on
SIGTERM or SIGINT stops accepting, lets in-flight calls finish (up to the grace period),
then flushes and closes the store. With ``--namesrv`` the broker joins a cluster
(``cluster_member.py``): it registers with every NameServer, answers routes for the whole
cluster, and unregisters before it stops. With ``--no-extensions`` (config
``grpc_extensions = false``) only ``apache.rocketmq.v2`` and gRPC health are served, so the
broker looks like any RocketMQ 5 gRPC endpoint (proxy). In controller mode a change of
role ends in a restart of the process in place (same pid, ``os.execv``).
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Sequence

from broker_core.errors import ServerError, StoreError
from broker_core.metrics import logs
from broker_core.server import assembly, options
from broker_core.server.app import BrokerServer

log = logging.getLogger(__name__)


def _raise_open_files_limit() -> None:
    """Lift the soft open-files limit to the hard one: every mapped segment and queue file
    holds a descriptor (``mmap`` keeps its own), so a big store outgrows the usual 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard and hard != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)


def _restart(argv: Sequence[str] | None, reason: str) -> None:
    """Run this broker again in this process (same pid): its next join applies the role."""
    log.warning("restarting the broker: %s", reason)
    args = list(argv) if argv is not None else sys.argv[1:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "broker_core.server", *args])


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
    args = options.parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    built = assembly.build(args)
    server, agent = built.server, built.controller
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        built.start()
    except OSError as exc:
        raise StoreError(
            f"cannot open the store at {server.broker.store_config.store_dir}: {exc}"
        ) from exc
    _raise_open_files_limit()
    _tune_garbage_collector()
    _announce(server)
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


def _announce(server: BrokerServer) -> None:
    """The lines launchers wait for (HA_LISTEN, METRICS, READY last) and the log's."""
    recovery = server.broker.recovery
    if recovery is not None:
        log.info("store opened: %s", recovery.summary())
    ha_endpoint = server.broker.replication.ha_endpoint
    if ha_endpoint:
        _say(f"HA_LISTEN {ha_endpoint}")
    if server.remoting is not None:
        log.info("remoting (4.x clients) on %s", server.remoting.address)
    if server.plugins.metrics_endpoint:
        _say(f"METRICS http://{server.plugins.metrics_endpoint}/metrics")
    _say(f"READY {server.endpoint}")


if __name__ == "__main__":
    sys.exit(run())
