"""Fixtures of the security and observability tests: real broker processes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from broker_core.server.launcher import launch_broker
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker


def start_with(workdir: Path, *, config: dict[str, dict[str, Any]] | None = None,
               extra_args: Sequence[str] = (),
               env: dict[str, str] | None = None) -> BrokerProcess:  # fmt: skip
    """A broker process with the suite's defaults plus ``config``, flags and environment."""
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in DEFAULT_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    return launch_broker(workdir, config=merged, extra_args=extra_args, env=env)


def metrics_url(proc: BrokerProcess) -> str:
    """The ``/metrics`` URL a broker printed before READY."""
    for line in proc.output:
        if line.startswith("METRICS "):
            return line.split()[1]
    raise AssertionError("broker printed no METRICS line:\n" + "".join(proc.output[-20:]))


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])
