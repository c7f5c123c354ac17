"""A test network of Linux network namespaces, and faults on its links.

Layout (one ``Network``, made as root)::

    root namespace (the test's clients)          10.213.K.1  on bridge nfx<PID>br
      ├── veth nfx<PID>h1 ─── eth0 in namespace nfx<PID>-<name1>  10.213.K.2
      ├── veth nfx<PID>h2 ─── eth0 in namespace nfx<PID>-<name2>  10.213.K.3
      └── ...

Every address lives only on the bridge and veths this module made (``K`` is picked per run
so two runs never share a subnet); nothing is routed anywhere else. Each node has its own
port space, so processes inside use fixed ports.

Faults are iptables rules *inside the node namespaces* (the root namespace gets none):

* ``partition(a, b)``: ``a`` drops every packet from ``b`` and ``b`` every packet from
  ``a`` (INPUT, silent; an OUTPUT drop would hand the sender EPERM, which no real network
  does). Clients in the root namespace still reach both.
* ``isolate(x)``: ``x`` drops every packet from any address but its own loopback.
* ``degrade(x, loss=…, delay_ms=…, jitter_ms=…)``: packets into ``x`` and from ``x`` into
  the other nodes are dropped at random (iptables ``statistic``); outbound TCP connections
  of ``x`` to other nodes are redirected through a relay in ``x`` that holds each chunk for
  ``delay_ms`` ± ``jitter_ms`` in each direction (``delay.py``). This kernel has no
  ``tc`` queueing disciplines at all (no netem), hence the relay.
* ``heal()``: every rule and relay gone.

``close()`` kills what still runs in the namespaces and deletes namespaces, veths and the
bridge; ``sweep()`` removes what a crashed earlier run left (names carry the owner's pid).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "nfx"
SUBNET_FIRST, SUBNET_COUNT = 20, 200  # 10.213.20.0/24 .. 10.213.219.0/24
DELAY_PORT = 19999  # the delay relay's port inside a degraded node
RELAY_MARK = 0x213  # SO_MARK on the relay's outbound sockets (not redirected again)


def unavailable() -> str:
    """Why namespaces cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (./dev installs iproute2 and iptables)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return ""


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def sweep() -> list[str]:
    """Delete namespaces and links of earlier runs whose process is gone; returns names."""
    gone: list[str] = []
    owner = re.compile(rf"^{PREFIX}(\d+)")
    for line in _run(["ip", "netns", "list"]).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        found = owner.match(name)
        if found and not _alive(int(found.group(1))):
            _kill_inside(name)
            _run(["ip", "netns", "del", name], check=False)
            gone.append(name)
    for line in _run(["ip", "-o", "link", "show"]).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        found = owner.match(name)
        if found and not _alive(int(found.group(1))):
            _run(["ip", "link", "del", name], check=False)
            gone.append(name)
    return gone


def _kill_inside(namespace: str) -> None:
    """SIGKILL each process still running in a namespace of ours (by pid)."""
    pids = _run(["ip", "netns", "pids", namespace], check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), 9)


def _free_subnet() -> int:
    used = _run(["ip", "-4", "-o", "addr", "show"]).stdout
    start = os.getpid() % SUBNET_COUNT
    for i in range(SUBNET_COUNT):
        k = SUBNET_FIRST + (start + i) % SUBNET_COUNT
        if f" 10.213.{k}." not in used:
            return k
    raise RuntimeError("no free 10.213.K.0/24 subnet for the test network")


@dataclass
class Node:
    name: str
    namespace: str
    ip: str
    host_veth: str

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this node's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Network:
    """Nodes on one bridge; see the module docstring."""

    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    nodes: dict[str, Node] = field(default_factory=dict)
    subnet: int = 0
    relays: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where clients' packets come from)."""
        return f"10.213.{self.subnet}.1"

    def start(self) -> Network:
        self.subnet = _free_subnet()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        return self

    def add(self, name: str) -> Node:
        """A new namespace ``name`` with the next address on the bridge."""
        index = len(self.nodes) + 1
        node = Node(
            name, f"{self.tag}-{name}", f"10.213.{self.subnet}.{index + 1}", f"{self.tag}h{index}"
        )
        peer = f"{self.tag}n{index}"
        _run(["ip", "netns", "add", node.namespace])
        self.nodes[name] = node
        ns = ["ip", "-n", node.namespace]
        _run(["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", node.namespace])
        _run([*ns, "link", "set", peer, "name", "eth0"])
        _run([*ns, "addr", "add", f"{node.ip}/24", "dev", "eth0"])
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "link", "set", "eth0", "up"])
        _run(["ip", "link", "set", node.host_veth, "master", self.bridge])
        _run(["ip", "link", "set", node.host_veth, "up"])
        return node

    # ---- faults ---------------------------------------------------------------------------

    def _rule(self, node: Node, *rule: str) -> None:
        _run(node.cmd(["iptables", "-w", *rule]))

    def partition(self, a: str, b: str) -> None:
        """Packets between ``a`` and ``b`` are dropped both ways; others are untouched."""
        na, nb = self.nodes[a], self.nodes[b]
        self._rule(na, "-A", "INPUT", "-s", nb.ip, "-j", "DROP")
        self._rule(nb, "-A", "INPUT", "-s", na.ip, "-j", "DROP")

    def isolate(self, x: str) -> None:
        """``x`` hears nobody (clients included); its loopback still works."""
        self._rule(self.nodes[x], "-A", "INPUT", "!", "-i", "lo", "-j", "DROP")

    def degrade(self, x: str, loss: float = 0.0, delay_ms: int = 0, jitter_ms: int = 0) -> None:
        """Random loss (fraction) on packets into and out of ``x``; delay ± jitter on
        ``x``'s outbound TCP connections to other nodes (each direction)."""
        node = self.nodes[x]
        if loss > 0:
            drop = ["-m", "statistic", "--mode", "random", "--probability", str(loss)]
            self._rule(node, "-A", "INPUT", "!", "-i", "lo", *drop, "-j", "DROP")
            for other in self.nodes.values():
                if other is not node:
                    self._rule(other, "-A", "INPUT", "-s", node.ip, *drop, "-j", "DROP")
        if delay_ms > 0:
            self._start_relay(node, delay_ms, jitter_ms)

    def _start_relay(self, node: Node, delay_ms: int, jitter_ms: int) -> None:
        argv = [sys.executable, "-m", "tests.netfaults.delay", str(DELAY_PORT)]
        relay = subprocess.Popen(
            node.cmd([*argv, str(delay_ms), str(jitter_ms)]),
            cwd=Path(__file__).resolve().parents[2],
            stdout=subprocess.PIPE,
        )
        assert relay.stdout is not None
        if relay.stdout.readline().strip() != b"READY":
            raise RuntimeError("the delay relay did not start")
        self.relays[node.name] = relay
        subnet = f"10.213.{self.subnet}.0/24"
        nat = ["-t", "nat", "-A", "OUTPUT", "-o", "eth0", "-p", "tcp", "-d", subnet]
        own = ["-m", "mark", "!", "--mark", str(RELAY_MARK)]  # the relay's own connections
        self._rule(node, *nat, *own, "-j", "REDIRECT", "--to-ports", str(DELAY_PORT))

    def heal(self) -> None:
        """Every fault removed: rules flushed, relays stopped."""
        for node in self.nodes.values():
            _run(node.cmd(["iptables", "-w", "-F", "INPUT"]))
            _run(node.cmd(["iptables", "-w", "-t", "nat", "-F", "OUTPUT"]))
        for relay in self.relays.values():
            relay.kill()
            relay.wait(10)
        self.relays.clear()

    def close(self) -> None:
        """Everything this network made is gone (processes inside are killed)."""
        for relay in self.relays.values():
            relay.kill()
            relay.wait(10)
        for node in self.nodes.values():
            _kill_inside(node.namespace)
            _run(["ip", "netns", "del", node.namespace], check=False)
            _run(["ip", "link", "del", node.host_veth], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        self.nodes.clear()
