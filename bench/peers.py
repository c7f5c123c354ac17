"""Peer servers for benchmarks, started on loopback by the bench and stopped after.

* Redis 7 Streams with AOF ``appendfsync everysec`` (its usual durable setting), from
  Debian's ``redis-server``; clients come from ``redis_client`` (redis-py with the
  hiredis parser, required).
* NATS JetStream (``nats-server -js``) with file storage, from Debian's ``nats-server``.
  Its file store writes each message to its block file at once but fsyncs only on a
  timer (``sync_interval``, 2 minutes by default), so it is the least durable of the
  three setups; the figure is still the one users get out of the box.

Each peer gets its own data directory under the bench's temp directory and a free port;
``stop()`` shuts it down and waits. ``versions()`` names the binaries the bench used.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_port(port, proc, "redis-server")
    return Peer("redis", port, proc)


def redis_client(port: int, **options: Any) -> Any:
    """A redis-py client on the local peer, parsing replies with hiredis (its fast C
    parser: XREAD replies parse about 3x faster). Refuses to run without it, so the peer is
    always measured at its best."""
    import redis
    import redis.utils

    if not redis.utils.HIREDIS_AVAILABLE:
        raise SystemExit("redis-py runs without hiredis: pip install 'redis[hiredis]'")
    return redis.Redis(host="127.0.0.1", port=port, **options)


def start_nats(workdir: Path) -> Peer:
    """nats-server with JetStream, file storage under ``workdir``, on a loopback port."""
    binary = require("nats-server", "nats-server")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = workdir / "nats.conf"
    # A config file rather than flags: it pins the store directory and the listen
    # address in one place, and keeps JetStream's default limits (no memory store).
    config.write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{workdir / "jetstream"}"\n}}\n'
    )
    proc = subprocess.Popen(
        [binary, "-js", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _wait_for_port(port, proc, "nats-server")
    return Peer("nats", port, proc)


def versions() -> dict[str, str]:
    """``redis-server --version`` and ``nats-server --version`` (or "not installed")."""
    found = {}
    for binary in ("redis-server", "nats-server"):
        path = shutil.which(binary)
        if path is None:
            found[binary] = "not installed"
            continue
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
        found[binary] = (done.stdout or done.stderr).strip()
    return found
