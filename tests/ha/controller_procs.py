"""Controller-mode groups on loopback: a real etcd and real broker processes.

``EtcdProcess`` runs ``/usr/bin/etcd`` on free ports; ``ControllerGroup`` starts brokers
of one group with ``--controller`` on fixed free ports (a broker that restarts itself
after a role change comes back on the same endpoint), knows which is master from etcd,
and sends with failover across the group's brokers (``send_any``).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.client import RocketMQClient
from broker_core.errors import RocketMQError
from broker_core.ha.controller import node_name
from broker_core.ha.etcd_state import EtcdGroup, GroupState
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.ha.conftest import FAST_HA, wait_until
from tests.server.conftest import DEFAULT_CONFIG

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EtcdProcess:
    url: str
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, data_dir: Path) -> EtcdProcess:
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        proc = subprocess.Popen(
            [
                ETCD,
                "--name",
                "n0",
                "--data-dir",
                str(data_dir),
                "--listen-client-urls",
                url,
                "--advertise-client-urls",
                url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"n0=http://127.0.0.1:{peer}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        etcd = cls(url, proc)
        probe = EtcdGroup(url, "probe")
        wait_until(lambda: _answers(probe), 20, "etcd to answer")
        return etcd

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(10)


@dataclass
class EtcdCluster:
    """Three etcd members on loopback; ``url`` lists every client URL (comma-separated)."""

    members: list[EtcdProcess]

    @property
    def url(self) -> str:
        return ",".join(m.url for m in self.members)

    @classmethod
    def start(cls, data_dir: Path, size: int = 3) -> EtcdCluster:
        ports = [(free_port(), free_port()) for _ in range(size)]
        initial = ",".join(f"n{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports))
        members = []
        for i, (client, peer) in enumerate(ports):
            url = f"http://127.0.0.1:{client}"
            proc = subprocess.Popen(
                [
                    ETCD,
                    "--name",
                    f"n{i}",
                    "--data-dir",
                    str(data_dir / f"n{i}"),
                    "--listen-client-urls",
                    url,
                    "--advertise-client-urls",
                    url,
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{peer}",
                    "--initial-cluster",
                    initial,
                    "--initial-cluster-state",
                    "new",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            members.append(EtcdProcess(url, proc))
        cluster = cls(members)
        for member in members:
            probe = EtcdGroup(member.url, "probe")
            wait_until(lambda p=probe: _answers(p), 30, "the etcd cluster to answer")  # type: ignore[misc]
        return cluster

    def stop(self) -> None:
        for member in self.members:
            member.stop()


def _answers(group: EtcdGroup) -> bool:
    try:
        group.state()
    except RocketMQError:
        return False
    return True


@dataclass
class ControllerGroup:
    etcd: EtcdProcess | EtcdCluster
    workdir: Path
    name: str = "g"
    broker: dict[str, Any] = field(default_factory=dict)
    procs: dict[str, BrokerProcess] = field(default_factory=dict)  # by node name
    ports: dict[str, int] = field(default_factory=dict)  # by member dir name
    namesrv: str = ""  # brokers register with it when set

    def start(self, member: str) -> BrokerProcess:
        """Start (or restart) member ``member`` (its own dir and fixed port)."""
        port = self.ports.setdefault(member, free_port())
        cfg = {
            "broker": {
                **DEFAULT_CONFIG["broker"],
                "broker_name": self.name,
                "ha_listen": "127.0.0.1:0",
                **FAST_HA,
                **self.broker,
            },
            "store": DEFAULT_CONFIG["store"],
        }
        proc = launch_broker(
            self.workdir / member,
            config=cfg,
            listen=f"127.0.0.1:{port}",
            extra_args=[
                "--controller",
                self.etcd.url,
                *(["--namesrv", self.namesrv] if self.namesrv else []),
            ],
        )
        self.procs[self.node(member)] = proc
        return proc

    def node(self, member: str) -> str:
        return node_name(str(self.workdir / member / "store"))

    def state(self, timeout_s: float = 15) -> GroupState | None:
        """The group's state; etcd errors are retried for ``timeout_s`` (a member down,
        an etcd leader election under way)."""
        group, deadline = EtcdGroup(self.etcd.url, self.name), time.monotonic() + timeout_s
        while True:
            try:
                return group.state()[0]
            except RocketMQError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def master(self) -> BrokerProcess:
        state = self.state()
        assert state is not None
        return self.procs[state.master]

    def endpoints(self) -> list[str]:
        return [p.endpoint for p in self.procs.values()]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGCONT)
                proc.stop()


class FailoverSender:
    """Sends to whichever broker of the group acknowledges, trying each in turn."""

    def __init__(self, endpoints: list[str], deadline_s: float = 30) -> None:
        self._clients = [RocketMQClient(e, max_attempts=1, timeout_s=3) for e in endpoints]
        self._at = 0
        self._deadline_s = deadline_s

    def send(self, topic: str, body: bytes) -> int:
        """Send until acknowledged (RocketMQError after ``deadline_s``); returns the index of
        the broker that acked."""
        end = time.monotonic() + self._deadline_s
        while True:
            client = self._clients[self._at]
            try:
                client.send(topic, body)
                return self._at
            except RocketMQError:
                if time.monotonic() > end:
                    raise
                self._at = (self._at + 1) % len(self._clients)
                time.sleep(0.02)

    def close(self) -> None:
        for client in self._clients:
            client.close()


@contextmanager
def running_group(
    tmp_path: Path, broker: dict[str, Any], members: Sequence[str] = ("a", "b")
) -> Iterator[ControllerGroup]:
    """A fresh etcd under ``tmp_path`` and the brokers ``members`` of one group (config
    ``broker``), all in sync; every process is stopped at exit."""
    etcd = EtcdProcess.start(tmp_path / "etcd")
    grp = ControllerGroup(etcd, tmp_path, broker=broker)
    try:
        for member in members:
            grp.start(member)
        wait_until(
            lambda: (state := grp.state()) is not None and len(state.in_sync) == len(members),
            30,
            f"all {len(members)} brokers in sync",
        )
        yield grp
    finally:
        grp.stop_all()
        etcd.stop()
