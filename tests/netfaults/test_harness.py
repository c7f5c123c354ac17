"""The network harness itself: partitions drop silently and only between the two nodes
named, isolation cuts clients too, degraded links lose and delay, heal undoes it all, and
close leaves nothing behind."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netfaults import net

PORT = 7000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def echoes(network: net.Network) -> Iterator[net.Network]:
    """Nodes a, b, c, each running an echo server on PORT."""
    servers = []
    for name in ("a", "b", "c"):
        node = network.add(name)
        argv = [sys.executable, "-m", "tests.netfaults.probe", "serve", node.ip, str(PORT)]
        proc = subprocess.Popen(node.cmd(argv), cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        servers.append(proc)
    yield network
    for proc in servers:
        proc.kill()
        proc.wait(10)


def probe(network: net.Network, src: str, dst: str, timeout_s: float = 1.0) -> str:
    """From node ``src`` to ``dst``'s echo: the round trip in ms, or the error's name."""
    argv = ["-m", "tests.netfaults.probe", "connect", network.nodes[dst].ip, str(PORT)]
    argv = network.nodes[src].cmd([sys.executable, *argv, str(timeout_s)])
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True).stdout.strip()


def from_root(network: net.Network, dst: str, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((network.nodes[dst].ip, PORT), timeout=timeout_s) as s:
            s.sendall(b"x")
            return s.recv(1) == b"x"
    except OSError:
        return False


def reachable(network: net.Network, src: str, dst: str) -> bool:
    return probe(network, src, dst).replace(".", "").isdigit()


def test_partition_isolate_heal(echoes: net.Network) -> None:
    network = echoes
    assert reachable(network, "a", "b") and from_root(network, "b")
    network.partition("a", "b")
    assert probe(network, "a", "b") == "TimeoutError", "a partition drops silently"
    assert not reachable(network, "b", "a")
    assert reachable(network, "a", "c") and reachable(network, "c", "b")
    assert from_root(network, "a") and from_root(network, "b"), "clients still reach both"
    network.heal()
    assert reachable(network, "a", "b") and reachable(network, "b", "a")
    network.isolate("c")
    assert not from_root(network, "c") and not reachable(network, "a", "c")
    assert reachable(network, "a", "b")
    network.heal()
    assert from_root(network, "c")


def test_degraded_link_delays_and_loses(echoes: net.Network) -> None:
    network = echoes
    network.degrade("a", delay_ms=100, jitter_ms=10)
    # the relay holds each direction ≥ 90 ms: a round trip cannot be faster than 180 ms
    assert float(probe(network, "a", "b", timeout_s=5)) >= 180
    assert float(probe(network, "b", "a", timeout_s=5)) < 180, "only a's connections"
    network.heal()
    network.degrade("a", loss=1.0)
    assert not reachable(network, "a", "b") and not reachable(network, "b", "a")
    network.heal()
    assert reachable(network, "a", "b")


def test_close_leaves_nothing_and_sweep_removes_a_dead_runs_leftovers(
    netns_ready: None,
) -> None:
    network = net.Network().start()
    network.add("x")
    namespace = network.nodes["x"].namespace
    network.close()
    assert (
        namespace
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert network.tag + "br" not in links
    dead = net.Network(tag=f"{net.PREFIX}999999999").start()  # no such pid: a crashed run
    dead.add("y")
    swept = net.sweep()
    assert f"{dead.tag}-y" in swept and f"{dead.tag}br" in swept
    assert (
        dead.tag not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )
