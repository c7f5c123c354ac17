"""Ports of a local cluster and the file that tells the CLI where it runs.

:class:`PortPlan` is what ``rmq cluster up`` is asked for: the NameServer's port and the
first broker's gRPC and remoting ports (the next brokers take the next ports), and
etcd's client port. 0 means
"any free port". :class:`PortAllocator` hands out each wanted port when it is free and
not already handed out, else a free port of the OS's choice (``fallbacks`` records
which), so a second cluster on the same host still starts.

:func:`write_endpoints` writes, under the cluster's directory:

* ``endpoints.json``: ``{"namesrv", "controller", "ca_file", "brokers": {key: {"group",
  "pid", "grpc", "remoting", "metrics"}}}`` for programs;
* ``env``: ``export RMQ_NAMESRV=…``, ``RMQ_ENDPOINTS=`` the first broker (and ``RMQ_CONTROLLER``,
  ``RMQ_CA_FILE`` when set) for a shell: ``. D/env`` points every ``rmq`` verb at the
  cluster.

Both are written atomically (temp file, rename) and removed by :func:`remove_endpoints`
when the cluster stops.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENDPOINTS_FILE = "endpoints.json"
ENV_FILE = "env"


@dataclass(frozen=True)
class PortPlan:
    """Wanted ports; 0 = any free port. ``README`` holds RocketMQ's usual ones."""

    namesrv: int = 0
    grpc: int = 0  # the first broker's; broker i wants grpc + i
    remoting: int = 0  # likewise
    etcd: int = 0  # the controller's client port

    @classmethod
    def readme(cls) -> PortPlan:
        """NameServer 9876, gRPC 8081…, remoting 10911…, etcd 2379 (the README's)."""
        return cls(9876, 8081, 10911, 2379)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``host:port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class PortAllocator:
    """Hands out ports: the wanted one if free and not yet handed out, else a free one."""

    host: str = "127.0.0.1"
    taken: set[int] = field(default_factory=set)
    fallbacks: list[tuple[int, int]] = field(default_factory=list)  # (wanted, given)

    def take(self, wanted: int) -> int:
        if wanted and wanted not in self.taken and port_is_free(wanted, self.host):
            port = wanted
        else:
            port = free_port(self.host)
            while port in self.taken:
                port = free_port(self.host)
            if wanted:
                self.fallbacks.append((wanted, port))
        self.taken.add(port)
        return port


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_endpoints(directory: Path, doc: dict[str, Any]) -> Path:
    """Write ``endpoints.json`` and ``env`` (see the module docstring); returns the env
    file's path. ``doc`` is the JSON document."""
    _write_atomically(directory / ENDPOINTS_FILE, json.dumps(doc, indent=2) + "\n")
    first: dict[str, Any] = next(iter(doc["brokers"].values()), {})
    env = {
        "RMQ_NAMESRV": doc["namesrv"],
        "RMQ_ENDPOINTS": first.get("grpc", ""),  # verbs of one broker: the first one
        "RMQ_CONTROLLER": doc.get("controller") or "",
        "RMQ_CA_FILE": doc.get("ca_file") or "",
    }
    lines = [f"export {key}={value}" for key, value in env.items() if value]
    _write_atomically(directory / ENV_FILE, "\n".join(lines) + "\n")
    return directory / ENV_FILE


def remove_endpoints(directory: Path) -> None:
    """Remove both files (a stopped cluster must not be found by them)."""
    for name in (ENDPOINTS_FILE, ENV_FILE):
        (directory / name).unlink(missing_ok=True)
