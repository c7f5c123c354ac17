"""A real broker process on a loopback port, shared by a test module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {"transaction_check_timeout_ms": 1_000, "transaction_check_interval_ms": 200,
               "pop_revive_interval_ms": 200, "default_queue_nums": 4},
    "store": {"segment_size_bytes": 16 << 20, "flush_interval_ms": 50},
}  # fmt: skip


@dataclass
class BrokerProcess:
    endpoint: str
    store_dir: Path
    process: subprocess.Popen[str]
    output: list[str]

    def stop(self, timeout_s: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)


def _toml(config: dict[str, dict[str, Any]]) -> str:
    lines = []
    for table, values in config.items():
        lines.append(f"[{table}]")
        for key, value in values.items():
            lines.append(f"{key} = {value!r}" if not isinstance(value, bool)
                         else f"{key} = {str(value).lower()}")  # fmt: skip
    return "\n".join(lines) + "\n"


def start_broker(workdir: Path, *, flush: str = "async",
                 config: dict[str, dict[str, Any]] | None = None) -> BrokerProcess:  # fmt: skip
    """Start ``python -m broker_core.server`` on a free loopback port; wait for READY."""
    merged = {k: dict(v) for k, v in DEFAULT_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "broker.toml"
    config_path.write_text(_toml(merged))
    store_dir = workdir / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker_core.server", "--listen", "127.0.0.1:0",
         "--store-dir", str(store_dir), "--flush", flush, "--config", str(config_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    output: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        if line.startswith("READY "):
            endpoint = line.split()[1]
            break
    else:
        raise RuntimeError("broker exited before READY:\n" + "".join(output))
    stream = proc.stdout
    threading.Thread(target=lambda: output.extend(stream), daemon=True).start()  # drain logs
    return BrokerProcess(endpoint, store_dir, proc, output)


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])
