"""A real broker process on a loopback port, shared by a test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.server.launcher import BrokerProcess, launch_broker

__all__ = ["DEFAULT_CONFIG", "BrokerProcess", "broker_process", "start_broker"]

DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {
        "transaction_check_timeout_ms": 1_000,
        "transaction_check_interval_ms": 200,
        "pop_revive_interval_ms": 200,
        "default_queue_nums": 4,
    },
    "store": {"segment_size_bytes": 16 << 20, "flush_interval_ms": 50},
}


def start_broker(
    workdir: Path, *, flush: str = "async", config: dict[str, dict[str, Any]] | None = None
) -> BrokerProcess:
    """Start ``python -m broker_core.server`` on a free loopback port; wait for READY."""
    merged = {k: dict(v) for k, v in DEFAULT_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    return launch_broker(workdir, flush=flush, config=merged)


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])
