"""The two brokers a scenario runs against, behind one shape: :class:`Target`.

* ``start_ours(dir)``: our NameServer and one broker (``broker-a``, cluster
  ``DefaultCluster``) serving gRPC and 4.x remoting, async flush, as child processes.
* ``start_peer(dir)``: Apache RocketMQ 5.x (``peers.rocketmq``): NameServer and a broker
  inside the gRPC proxy.

A :class:`Target` runs the Java drivers and mqadmin against itself (``c5``, ``c4``,
``admin``), and the official Python and Node.js clients and the C++ client (``py``,
``node``, ``cpp``, ``cpp_consumer``; :mod:`tests.conformance.clients`), each client's
files under the target's own directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.cluster.local import LocalCluster
from peers import drivers
from peers.rocketmq import CLUSTER, start_rocketmq
from tests.conformance import clients

OURS_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {
        "transaction_check_timeout_ms": 1_000,
        "transaction_check_interval_ms": 200,
        "default_queue_nums": 4,
        "trace_topic_enable": True,  # as the peer's traceTopicEnable
    },
    "store": {"segment_size_bytes": 64 << 20},
}


@dataclass
class Target:
    name: str  # "rocketmq" or "ours"
    namesrv: str
    grpc: str
    cluster: str
    home: Path
    stop: Callable[[], None]

    def c5(self, *args: str, timeout_s: float = 120) -> drivers.Run:
        return drivers.client5(self.grpc, list(args), self.home / "clients", timeout_s)

    def c4(self, *args: str, timeout_s: float = 120) -> drivers.Run:
        return drivers.client4(self.namesrv, list(args), self.home / "clients", timeout_s)

    def admin(self, *args: str) -> str:
        return drivers.mqadmin(self.namesrv, list(args), self.home / "clients")

    def py(self, *args: str, timeout_s: float = 120) -> drivers.Run:
        return clients.python_client(self.grpc, list(args), self.home / "clients", timeout_s)

    def node(self, *args: str) -> dict[str, Any]:
        return clients.node_client(self.grpc, list(args), self.home / "clients")

    def cpp(self, script: str, *args: str) -> list[dict[str, Any]]:
        return clients.cpp_client(script, [self.namesrv, *args], self.home / "clients")

    def cpp_consumer(self, *args: str) -> clients.CppConsumer:
        return clients.CppConsumer([self.namesrv, *args], self.home / "clients")

    def topic(self, topic: str, queues: int = 4, *extra: str) -> None:
        out = self.admin(
            "updateTopic",
            "-c",
            self.cluster,
            "-t",
            topic,
            "-r",
            str(queues),
            "-w",
            str(queues),
            *extra,
        )
        if "success" not in out:
            raise RuntimeError(f"{self.name}: updateTopic {topic} failed:\n{out[-1500:]}")

    def group(self, group: str, *extra: str) -> None:
        out = self.admin("updateSubGroup", "-c", self.cluster, "-g", group, *extra)
        if "success" not in out:
            raise RuntimeError(f"{self.name}: updateSubGroup {group} failed:\n{out[-1500:]}")


def start_ours(directory: Path, config: dict[str, dict[str, Any]] | None = None) -> Target:
    """Ours; ``config``'s tables laid over :data:`OURS_CONFIG` (e.g. trace options)."""
    merged = {table: dict(values) for table, values in OURS_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    local = LocalCluster(
        directory,
        broker_config=merged,
        register_interval_ms=500,
        broker_args=["--remoting-listen", "127.0.0.1:0"],
    )
    local.start(1)
    endpoint = local.endpoints["broker-a"]
    return Target("ours", local.namesrv, endpoint, "DefaultCluster", directory, local.stop)


def start_peer(directory: Path) -> Target:
    peer = start_rocketmq(directory)
    return Target("rocketmq", peer.namesrv, peer.grpc, CLUSTER, directory, peer.stop)
