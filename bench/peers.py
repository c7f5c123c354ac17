"""Peer servers for benchmarks, started on loopback by the bench and stopped after.

Redis 7 Streams with AOF ``appendfsync everysec`` (its usual durable setting), from
Debian's ``redis-server``. Each peer gets its own data directory under the bench's temp
directory and a free port; ``stop()`` shuts it down and waits.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise SystemExit(f"{binary} not found: install Debian's {package} (./dev bench does)")
    return path


@dataclass
class Peer:
    name: str
    port: int
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(30)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def start_redis(workdir: Path) -> Peer:
    """redis-server on loopback with AOF fsync every second, no RDB snapshots."""
    binary = require("redis-server", "redis-server")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
         "--protected-mode", "yes", "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for_port(port, proc, "redis-server")
    return Peer("redis", port, proc)
