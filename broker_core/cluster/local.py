"""A NameServer and N broker groups as child processes on loopback (``rmq cluster up``).

:class:`LocalCluster` starts a NameServer, waits until it accepts connections, then
starts brokers ``broker-a``, ``broker-b``, ... (with ``replicas`` > 1 each a group of
that many brokers; with ``controller`` an etcd too, and the groups elect their masters)
each with its store under ``directory/<key>`` and ``--namesrv`` pointing at it, and
waits until every one is registered (listed by the NameServer). Ports follow a
:class:`~broker_core.cluster.ports.PortPlan` (default: any free port); each broker keeps
its ports for life, so :meth:`LocalCluster.restart` brings it back on the same endpoint.
Stores use small files (``SMALL_STORE``: 64 MiB commitlog segments) unless the config
says otherwise. A failed ``start()`` stops what it started and removes the files and
directories it created. ``stop()`` stops the brokers (SIGTERM: they unregister) and
then the NameServer; it is idempotent. Used by the CLI, the example, the tests and the
benchmark.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.cluster.ports import PortAllocator, PortPlan, free_port
from broker_core.errors import RocketMQError
from broker_core.namesrv.client import NameServerClient
from broker_core.server.launcher import ROOT, BrokerProcess, launch_broker

NAMESRV_START_TIMEOUT_S = 20.0
REGISTER_TIMEOUT_S = 20.0
LOG_FLUSH_S = 0.5
MIB = 1 << 20
SMALL_STORE = {  # a local cluster's stores: small files, not RocketMQ's 1 GiB segments
    "segment_size_bytes": 64 * MIB,
    "consume_queue_units_per_file": 30_000,
    "index_slot_count": 50_000,
    "index_max_entries": 200_000,
}


def wait_accepting(addr: str, timeout_s: float, proc: subprocess.Popen[Any] | None = None) -> None:
    """Return once ``addr`` accepts TCP connections; RuntimeError on timeout or exit."""
    host, _, port = addr.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process for {addr} exited with {proc.returncode}")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{addr} did not accept connections within {timeout_s:.0f} s")


def start_namesrv(
    addr: str, log_path: Path, extra_args: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m broker_core.namesrv --listen addr`` (what ``rmq namesrv start`` runs) as
    a child, output to ``log_path``; returns once it accepts connections."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core.namesrv", "--listen", addr, *(extra_args or [])],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        wait_accepting(addr, NAMESRV_START_TIMEOUT_S, proc)
    except RuntimeError:
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"NameServer did not start:\n{log_path.read_text()[-2000:]}") from None
    return proc


def start_etcd(data_dir: Path, client_port: int = 0) -> tuple[str, subprocess.Popen[bytes]]:
    """A one-member etcd on loopback (``client_port``, 0 = a free one; output to
    ``data_dir``.log); returns its client URL once it accepts connections. RuntimeError
    when ``etcd`` is not installed."""
    etcd = shutil.which("etcd")
    if etcd is None:
        raise RuntimeError("--controller needs etcd: apt-get install etcd-server (./dev does)")
    client = f"127.0.0.1:{client_port or free_port()}"
    peer = f"http://127.0.0.1:{free_port()}"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(data_dir.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen(
            [
                etcd,
                "--name",
                "n0",
                "--data-dir",
                str(data_dir),
                "--listen-client-urls",
                f"http://{client}",
                "--advertise-client-urls",
                f"http://{client}",
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"n0={peer}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_accepting(client, NAMESRV_START_TIMEOUT_S, proc)
    return f"http://{client}", proc


def broker_names(count: int) -> list[str]:
    """``broker-a``, ``broker-b``, ... (then ``broker-27``, ... past z)."""
    letters = string.ascii_lowercase
    return [f"broker-{letters[i]}" if i < 26 else f"broker-{i + 1}" for i in range(count)]


def wait_registered(
    namesrv: str, names: list[str], timeout_s: float = REGISTER_TIMEOUT_S, *, present: bool = True
) -> None:
    """Wait until the NameServer lists every broker of ``names`` (or none when
    ``present`` is False); RuntimeError on timeout."""
    client = NameServerClient(namesrv)
    try:
        deadline = time.monotonic() + timeout_s
        listed: set[str] = set()
        while time.monotonic() < deadline:
            try:
                listed = {b.broker_name for b in client.get_cluster_info().live}
            except RocketMQError:
                listed = set()
            if (set(names) <= listed) if present else not (set(names) & listed):
                return
            time.sleep(0.05)
        raise RuntimeError(
            f"brokers {names} {'not' if present else 'still'} registered "
            f"within {timeout_s:.0f} s (listed: {sorted(listed)})"
        )
    finally:
        client.close()


class BrokerLogs:
    """Copies each broker's output (``BrokerProcess.output``) to its ``broker.log`` every
    ``LOG_FLUSH_S``, so a cluster's logs are on disk while it runs and after it stops."""

    def __init__(self, brokers: dict[str, BrokerProcess]) -> None:
        self._brokers = brokers
        self._files: dict[str, tuple[Path, list[str], int]] = {}  # key -> (path, output, done)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="broker-logs", daemon=True)
        self._thread.start()

    def follow(self, key: str, path: Path) -> None:
        with self._lock:
            self._files[key] = (path, self._brokers[key].output, 0)

    def _run(self) -> None:
        while not self._stop.wait(LOG_FLUSH_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            for key, (path, output, done) in list(self._files.items()):
                lines = output[done:]
                if lines:
                    with open(path, "a") as log:
                        log.writelines(lines)
                    self._files[key] = (path, output, done + len(lines))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.flush()


@dataclass
class LocalCluster:
    """One NameServer and its brokers, all children of this process."""

    directory: Path
    broker_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    register_interval_ms: int = 30_000
    broker_args: list[str] = field(default_factory=list)  # more ``broker start`` flags
    namesrv: str = ""
    namesrv_process: subprocess.Popen[bytes] | None = None
    brokers: dict[str, BrokerProcess] = field(default_factory=dict)
    replicas: int = 1  # brokers per group (keys ``name``, ``name/1``, …)
    controller: bool = False  # start etcd; groups elect their masters (``ha.controller``)
    replication: str = "sync"
    etcd_url: str = ""
    etcd_process: subprocess.Popen[bytes] | None = None
    metrics: bool = False  # each broker serves /metrics on a free loopback port
    ports: PortPlan = field(default_factory=PortPlan)
    allocator: PortAllocator = field(default_factory=PortAllocator)
    remoting: dict[str, str] = field(default_factory=dict)  # broker key -> 4.x address
    _argv: dict[str, tuple[Path, str, list[str]]] = field(default_factory=dict)
    _created: list[Path] = field(default_factory=list)
    _logs: BrokerLogs | None = None

    def _own_args(self, key: str) -> list[str]:
        """Flags of broker ``key`` alone: ``--metrics-listen`` (any free port) when on."""
        return ["--metrics-listen", "127.0.0.1:0"] if self.metrics else []

    @property
    def metrics_urls(self) -> dict[str, str]:
        """Broker key -> the ``/metrics`` URL it printed (``METRICS URL``) before READY."""
        return {
            key: line.split()[1]
            for key, proc in self.brokers.items()
            for line in list(proc.output)
            if line.startswith("METRICS ")
        }

    def _note_new(self, path: Path) -> Path:
        """Remember ``path`` for removal after a failed start if it does not exist yet."""
        if not path.exists():
            self._created.append(path)
        return path

    def start(self, broker_count: int, *, namesrv_args: list[str] | None = None) -> LocalCluster:
        """Start the NameServer and ``broker_count`` brokers; returns self once all are
        registered (on failure: stops what it started, removes what it created)."""
        self._note_new(self.directory)
        try:
            self.namesrv = f"127.0.0.1:{self.allocator.take(self.ports.namesrv)}"
            self.namesrv_process = start_namesrv(
                self.namesrv, self._note_new(self.directory / "namesrv.log"), namesrv_args
            )
            if self.controller:
                etcd_dir = self._note_new(self.directory / "etcd")
                self._note_new(etcd_dir.with_suffix(".log"))
                self.etcd_url, self.etcd_process = start_etcd(
                    etcd_dir, self.allocator.take(self.ports.etcd)
                )
            for name in broker_names(broker_count):
                if self.replicas > 1 or self.controller:
                    self.add_group(name)
                else:
                    self.add_broker(name, wait=False)
            wait_registered(self.namesrv, broker_names(broker_count))
        except BaseException:
            self.stop()
            self._remove_created()
            raise
        return self

    def _remove_created(self) -> None:
        for path in reversed(self._created):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self._created.clear()

    def _launch(self, key: str, group_args: list[str]) -> BrokerProcess:
        """Start broker ``key`` (store under ``directory/key``) on the next planned ports."""
        index = len(self._argv)
        grpc = self.allocator.take(self.ports.grpc + index if self.ports.grpc else 0)
        remoting = self.allocator.take(self.ports.remoting + index if self.ports.remoting else 0)
        self.remoting[key] = f"127.0.0.1:{remoting}"
        args = [
            "--namesrv",
            self.namesrv,
            "--register-interval-ms",
            str(self.register_interval_ms),
            "--remoting-listen",
            self.remoting[key],
            *group_args,
            *self._own_args(key),
            *self.broker_args,
        ]
        workdir = self._note_new(self.directory / key.replace("/", "-"))
        self._argv[key] = (workdir, f"127.0.0.1:{grpc}", args)
        return self.restart(key)

    def restart(self, key: str) -> BrokerProcess:
        """(Re)start broker ``key`` with its first flags, ports and store; returns once it
        serves (RuntimeError if it exits before)."""
        workdir, listen, args = self._argv[key]
        store = {**SMALL_STORE, **self.broker_config.get("store", {})}
        proc = launch_broker(
            workdir,
            config={**self.broker_config, "store": store},
            listen=listen,
            extra_args=args,
        )
        self.brokers[key] = proc
        if self._logs is None:
            self._logs = BrokerLogs(self.brokers)
        self._logs.follow(key, workdir / "broker.log")
        return proc

    def add_broker(self, name: str, *, wait: bool = True) -> BrokerProcess:
        """Start broker group ``name`` (store under ``directory/name``)."""
        proc = self._launch(name, ["--broker-name", name])
        if wait:
            wait_registered(self.namesrv, [name])
        return proc

    def add_group(self, name: str) -> None:
        """Start ``replicas`` brokers of group ``name``: with the controller each joins
        through etcd; without it the first is the master and the others its slaves."""
        master_ha = ""
        for i in range(self.replicas):
            key = name if i == 0 else f"{name}/{i}"
            args = ["--broker-name", name, "--replication", self.replication]
            if self.controller:
                args += ["--controller", self.etcd_url, "--ha-listen", "127.0.0.1:0"]
            elif i == 0:
                args += ["--broker-id", "0", "--ha-listen", "127.0.0.1:0"]
            else:
                args += ["--broker-id", str(i), "--ha-master", master_ha]
            proc = self._launch(key, args)
            master_ha = master_ha or proc.ha_endpoint

    @property
    def endpoints(self) -> dict[str, str]:
        """Broker key -> gRPC endpoint."""
        return {name: proc.endpoint for name, proc in self.brokers.items()}

    def describe(self, ca_file: str = "") -> dict[str, Any]:
        """What ``endpoints.json`` holds (``broker_core.cluster.ports``)."""
        metrics = self.metrics_urls
        return {
            "namesrv": self.namesrv,
            "controller": self.etcd_url or None,
            "ca_file": ca_file or None,
            "brokers": {
                key: {
                    "group": key.split("/")[0],
                    "pid": proc.process.pid,
                    "grpc": proc.endpoint,
                    "remoting": self.remoting.get(key, ""),
                    "metrics": metrics.get(key),
                }
                for key, proc in self.brokers.items()
            },
        }

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM every broker (they unregister), then the NameServer; idempotent."""
        for proc in self.brokers.values():
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGTERM)
        for proc in self.brokers.values():
            try:
                proc.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self._logs is not None:
            self._logs.close()
        etcd = self.etcd_process
        if etcd is not None and etcd.poll() is None:
            etcd.terminate()
            etcd.wait(timeout_s)
        ns = self.namesrv_process
        if ns is not None and ns.poll() is None:
            ns.send_signal(signal.SIGTERM)
            try:
                ns.wait(timeout_s)
            except subprocess.TimeoutExpired:
                ns.kill()
                ns.wait(10)
