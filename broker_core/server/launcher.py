"""Start a broker as a child process on a free loopback port (tests, benchmarks, demos).

``launch_broker`` runs ``python -m broker_core.server`` with a TOML config it writes,
waits for the ``READY host:port`` line, and keeps draining the child's output so it
never blocks on a full pipe. ``BrokerProcess.stop`` sends SIGTERM (graceful shutdown).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_core.client import standard

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class BrokerProcess:
    endpoint: str
    store_dir: Path
    process: subprocess.Popen[str]
    output: list[str]
    ha_endpoint: str = ""  # a group master's HA port (its ``HA_LISTEN`` line)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait; returns the exit code (0 after a clean shutdown)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash, for recovery tests."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


def to_toml(config: dict[str, dict[str, Any]]) -> str:
    lines = []
    for table, values in config.items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else repr(value)
            lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def launch_broker(
    workdir: Path,
    *,
    flush: str = "async",
    config: dict[str, dict[str, Any]] | None = None,
    listen: str = "127.0.0.1:0",
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> BrokerProcess:
    """Start a broker whose store is ``workdir/store``; returns once it accepts calls.

    ``extra_args`` go to ``python -m broker_core.server`` as they are (e.g. ``--namesrv``);
    ``wrapper`` comes before the command (e.g. ``ip netns exec NS``, which execs it, so the
    process is still the broker).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "broker.toml"
    config_path.write_text(to_toml(config or {}))
    store_dir = workdir / "store"
    proc = subprocess.Popen(
        [
            *wrapper,
            sys.executable,
            "-m",
            "broker_core.server",
            "--listen",
            listen,
            "--store-dir",
            str(store_dir),
            "--flush",
            flush,
            "--config",
            str(config_path),
            *extra_args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
    )
    output: list[str] = []
    assert proc.stdout is not None
    endpoint = ha_endpoint = ""
    for line in proc.stdout:
        output.append(line)
        if line.startswith("HA_LISTEN "):
            ha_endpoint = line.split()[1]
        if line.startswith("READY "):
            endpoint = line.split()[1]
            break
    if not endpoint:
        proc.wait(30)
        raise RuntimeError("broker exited before READY:\n" + "".join(output[-40:]))
    stream = proc.stdout
    threading.Thread(target=lambda: output.extend(stream), daemon=True).start()
    # a broker that served this address before may have offered only apache.rocketmq.v2
    standard.forget(endpoint)
    return BrokerProcess(endpoint, store_dir, proc, output, ha_endpoint)
