"""A controller-mode broker group on a test ``Network``: etcd members and brokers each in
their own namespace (fixed ports: every node has its own port space), clients in the root
namespace.

``NetGroup.start_etcd(names)`` runs one etcd member per node; ``start_broker(name)`` runs
``python -m broker_core.server --controller`` inside node ``name`` (a role change restarts
the server inside the same process, so it stays in its namespace). ``state()`` reads the
group's state from etcd from the root namespace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.errors import RocketMQError
from broker_core.ha.controller import node_name
from broker_core.ha.etcd_state import EtcdGroup, GroupState
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.ha.conftest import FAST_HA, wait_until
from tests.netfaults.net import Network, Node
from tests.server.conftest import DEFAULT_CONFIG

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ROOT = Path(__file__).resolve().parents[2]
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
BROKER_PORT, HA_PORT = 8081, 10912
SYNC = {"replication": "sync", "sync_replication_timeout_ms": 2_000, "ha_catch_up_window_ms": 3_000}


@dataclass
class NetGroup:
    network: Network
    workdir: Path
    name: str = "g"
    broker: dict[str, Any] = field(default_factory=dict)
    etcd: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    procs: dict[str, BrokerProcess] = field(default_factory=dict)  # by node name

    @property
    def etcd_url(self) -> str:
        return ",".join(f"http://{self.network.nodes[n].ip}:{ETCD_CLIENT_PORT}" for n in self.etcd)

    def start_etcd(self, names: list[str]) -> None:
        peers = ",".join(f"{n}=http://{self.network.nodes[n].ip}:{ETCD_PEER_PORT}" for n in names)
        for name in names:
            node = self.network.nodes[name]
            client = f"http://{node.ip}:{ETCD_CLIENT_PORT}"
            peer = f"http://{node.ip}:{ETCD_PEER_PORT}"
            argv = [ETCD, "--name", name, "--data-dir", str(self.workdir / f"etcd-{name}")]
            argv += ["--listen-client-urls", client, "--advertise-client-urls", client]
            argv += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
            argv += ["--initial-cluster", peers, "--initial-cluster-state", "new"]
            self.etcd[name] = subprocess.Popen(
                node.cmd(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        for name in names:
            probe = EtcdGroup(f"http://{self.network.nodes[name].ip}:{ETCD_CLIENT_PORT}", "p")
            wait_until(lambda p=probe: _answers(p), 30, f"etcd member {name} to answer")  # type: ignore[misc]

    def start_broker(self, name: str) -> BrokerProcess:
        node = self.network.nodes[name]
        cfg = {
            "broker": {
                **DEFAULT_CONFIG["broker"],
                "broker_name": self.name,
                "ha_listen": f"{node.ip}:{HA_PORT}",
                **FAST_HA,
                **self.broker,
            },
            "store": DEFAULT_CONFIG["store"],
        }
        proc = launch_broker(
            self.workdir / name,
            config=cfg,
            listen=f"{node.ip}:{BROKER_PORT}",
            extra_args=["--controller", self.etcd_url],
            wrapper=node.cmd([]),
        )
        self.procs[name] = proc
        return proc

    def node_of(self, name: str) -> str:
        """The broker's node name in the group state (host + digest of its store dir)."""
        return node_name(str(self.workdir / name / "store"))

    def state(self, timeout_s: float = 15) -> GroupState:
        """The group's state (etcd errors retried for ``timeout_s``)."""
        group, deadline = EtcdGroup(self.etcd_url, self.name), time.monotonic() + timeout_s
        while True:
            try:
                state = group.state()[0]
                if state is not None:
                    return state
            except RocketMQError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no state of group {self.name} in etcd")
            time.sleep(0.1)

    def master(self) -> str:
        """The name of the master's node (broker name as started)."""
        by_node = {self.node_of(n): n for n in self.procs}
        return by_node[self.state().master]

    def in_sync(self) -> set[str]:
        by_node = {self.node_of(n): n for n in self.procs}
        return {by_node[m] for m in self.state().in_sync if m in by_node}

    def endpoints(self) -> list[str]:
        return [p.endpoint for p in self.procs.values()]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.process.poll() is None:
                proc.stop()
        for member in self.etcd.values():
            member.terminate()
            member.wait(10)


NAMESRV_PORT = 9876


def start_namesrv(node: Node, **flags: int) -> subprocess.Popen[str]:
    """A NameServer on ``node`` (``flags``: e.g. ``broker_expiry_ms=2000``); returns once it
    said READY (its output is then discarded)."""
    argv = [sys.executable, "-m", "broker_core.namesrv", "--listen", f"{node.ip}:{NAMESRV_PORT}"]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    proc = subprocess.Popen(
        node.cmd(argv), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("READY "):
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc
    raise RuntimeError("NameServer exited before READY:\n" + "".join(lines[-30:]))


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def start_member(node: Node, workdir: Path, name: str, namesrv: str) -> BrokerProcess:
    """A broker ``name`` (a group of one) on ``node`` that registers with ``namesrv``."""
    return launch_broker(
        workdir,
        config={k: dict(v) for k, v in DEFAULT_CONFIG.items()},
        listen=f"{node.ip}:{BROKER_PORT}",
        extra_args=[
            *("--namesrv", namesrv, "--broker-name", name),
            *("--register-interval-ms", "500", "--route-ttl-ms", "300"),
        ],
        wrapper=node.cmd([]),
    )


def _answers(group: EtcdGroup) -> bool:
    try:
        group.state()
    except RocketMQError:
        return False
    return True
