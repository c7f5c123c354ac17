"""``rmq cluster up``: start a :class:`LocalCluster`, tell the user where it runs, supervise
it until SIGTERM/SIGINT, stop it.

Printed on stdout, one line each, before ``READY``: ``controller URL`` (with etcd),
``namesrv ADDR``, ``broker KEY ENDPOINT`` per broker, ``metrics KEY URL``, ``console URL``
(the web console, when the ``console`` extra is installed), ``ca FILE``
and an ``export …`` line (with TLS), ``port WANTED taken: GIVEN`` for every port that was
not free, ``endpoints FILE`` and ``env FILE``. After ``READY``: what the
:class:`~broker_core.cluster.supervisor.Supervisor` reports. A start that fails stops
what it started and, when ``directory`` did not exist before, removes it (TLS files
included); RuntimeError says why.
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from broker_core.cluster.local import LocalCluster
from broker_core.cluster.ports import PortPlan, remove_endpoints, write_endpoints
from broker_core.cluster.supervisor import Supervisor

if TYPE_CHECKING:
    from broker_core.console.server import ConsoleServer


def _say(line: str, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(line + "\n")
    stream.flush()


def run_up(
    directory: Path,
    *,
    count: int,
    register_interval_ms: int,
    replicas: int,
    controller: bool,
    tls: bool,
    restart: bool,
    namesrv_port: int,
    grpc_port: int,
    remoting_port: int,
    etcd_port: int,
) -> None:
    """Start, report, supervise until a signal, stop (see the module docstring)."""
    from broker_core.cluster.tls import enable_tls

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    existed = directory.exists()
    try:
        secure = enable_tls(directory) if tls else None
        local = LocalCluster(
            directory,
            register_interval_ms=register_interval_ms,
            replicas=replicas,
            controller=controller,
            metrics=True,
            broker_config={"tls": secure.broker_tls} if secure else {},
            ports=PortPlan(namesrv_port, grpc_port, remoting_port, etcd_port),
        )
        local.start(count, namesrv_args=secure.namesrv_args if secure else None)
    except BaseException:
        if not existed:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    ca_file = str(secure.ca_file) if secure is not None else ""
    console: ConsoleServer | None = None
    try:
        console = _start_console(local.namesrv)
        _announce(local, ca_file, console.url if console else "")
        supervisor = Supervisor(
            local,
            _say,
            restart=restart,
            on_change=lambda: write_endpoints(directory, local.describe(ca_file)),
        )
        supervisor.run(stop)
    finally:
        remove_endpoints(directory)
        if console is not None:
            console.stop()
        local.stop()


def _start_console(namesrv: str) -> ConsoleServer | None:
    """The cluster's web console on a free loopback port; None without the extra."""
    try:
        from broker_core.console.server import start_console
    except ImportError:  # pip install 'rocketmq-spark[console]'
        return None
    return start_console("127.0.0.1:0", namesrv=namesrv)


def _announce(local: LocalCluster, ca_file: str, console_url: str) -> None:
    if local.etcd_url:
        _say(f"controller {local.etcd_url}")
    _say(f"namesrv {local.namesrv}")
    for name, endpoint in local.endpoints.items():
        _say(f"broker {name} {endpoint}")
    for name, url in local.metrics_urls.items():
        _say(f"metrics {name} {url}")
    if console_url:
        _say(f"console {console_url}")
    if ca_file:
        _say(f"ca {ca_file}")
        _say(f"export RMQ_CA_FILE={ca_file} GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca_file}")
    for wanted, given in local.allocator.fallbacks:
        _say(f"port {wanted} taken: {given}")
    env = write_endpoints(local.directory, local.describe(ca_file))
    _say(f"endpoints {local.directory / 'endpoints.json'}")
    _say(f"env {env}")
    _say("READY")
