"""Start and stop cluster processes (NameServers) on free loopback ports, for tests.

``start_cluster_broker(workdir, namesrv, name)`` starts a broker that joins it.
``start_namesrv()`` runs ``python -m broker_core.namesrv`` and returns ``(proc,
"127.0.0.1:PORT")`` once the NameServer accepts connections; ``stop_namesrv(proc)`` sends
SIGTERM and returns the exit code; ``proc.kill()`` is a crash. The child's output is
drained into ``proc.output`` (a list of lines) so it never blocks on a full pipe.

Example::

    proc, addr = start_namesrv(scan_interval_ms=200, broker_expiry_ms=1_000)
    try:
        NameServerClient(addr).get_all_topics()
    finally:
        stop_namesrv(proc)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from broker_core.server.launcher import BrokerProcess, launch_broker

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 30.0


class NamesrvProcess(subprocess.Popen[str]):
    """A NameServer child process; ``output`` collects its stdout and stderr lines."""

    output: list[str]
    addr: str


def start_namesrv(
    *,
    port: int = 0,
    scan_interval_ms: int = 5_000,
    broker_expiry_ms: int = 120_000,
    extra_args: list[str] | None = None,
) -> tuple[NamesrvProcess, str]:
    """Start a NameServer on ``127.0.0.1:port`` (0 = a free port) and wait until it accepts
    (``extra_args``, e.g. ``--tls-cert``, go to its command line as they are)."""
    proc = NamesrvProcess(
        [
            sys.executable,
            "-m",
            "broker_core.namesrv",
            "--listen",
            f"127.0.0.1:{port}",
            "--scan-interval-ms",
            str(scan_interval_ms),
            "--broker-expiry-ms",
            str(broker_expiry_ms),
            *(extra_args or []),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    proc.output = []
    addr = _read_ready(proc)
    stream = proc.stdout
    assert stream is not None
    threading.Thread(target=lambda: proc.output.extend(stream), daemon=True).start()
    wait_accepting(addr)
    proc.addr = addr
    return proc, addr


def _read_ready(proc: NamesrvProcess) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        proc.output.append(line)
        if line.startswith("READY "):
            return line.split()[1]
    proc.wait(30)
    raise RuntimeError("NameServer exited before READY:\n" + "".join(proc.output[-40:]))


def wait_accepting(addr: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Return once ``addr`` accepts a TCP connection; ``TimeoutError`` after ``timeout_s``."""
    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{addr} does not accept connections") from None
            time.sleep(0.02)


def stop_namesrv(proc: subprocess.Popen[str], timeout_s: float = 15.0) -> int:
    """SIGTERM and wait; returns the exit code (0 after a clean stop). Kills on timeout."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)
        raise


# ---- brokers that join a cluster (the cluster branch) ---------------------------------------


def start_cluster_broker(
    workdir: Path,
    namesrv: str,
    broker_name: str | None = None,
    *,
    register_interval_ms: int = 500,
    route_ttl_ms: int = 300,
    config: dict[str, dict[str, Any]] | None = None,
    extra_args: list[str] | None = None,
) -> BrokerProcess:
    """Start a broker on a free loopback port that registers with ``namesrv`` (as
    ``broker_name``, or its default name) and wait for READY; stop it with ``.stop()``
    (SIGTERM: it unregisters) or ``.kill()``. Raises RuntimeError with the broker's output
    when it exits before READY (e.g. a name clash)."""
    args = [
        "--namesrv",
        namesrv,
        "--register-interval-ms",
        str(register_interval_ms),
        "--route-ttl-ms",
        str(route_ttl_ms),
        *(extra_args or []),
    ]
    if broker_name is not None:
        args += ["--broker-name", broker_name]
    return launch_broker(workdir, config=config, extra_args=args)


def send_numbered(endpoint: str, topic: str, count: int, timeout_s: float = 60.0) -> None:
    """Send ``m-000000`` … with the official Producer through ``endpoint`` only (async,
    every future awaited): the route it is given decides which broker groups get them."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        futures = []
        for i in range(count):
            message = Message()
            message.topic, message.body = topic, b"m-%06d" % i
            futures.append(producer.send_async(message))
        for future in futures:
            future.result(timeout=timeout_s)
    finally:
        producer.shutdown()
