"""Fixtures of the security and observability tests: real broker processes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from broker_core.server.launcher import launch_broker, to_toml
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker

ADMIN_KEY, ADMIN_SECRET = "admin", "admin-secret-1"
AUTH_TOML = f"""
[auth]
enabled = true
[[auth.users]]
access_key = "{ADMIN_KEY}"
secret_key = "{ADMIN_SECRET}"
superuser = true
"""


def start_with(
    workdir: Path,
    *,
    config: dict[str, dict[str, Any]] | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    extra_toml: str = "",
) -> BrokerProcess:
    """A broker process with the suite's defaults plus ``config``, flags, environment and
    raw TOML appended to its config file (``[auth]`` users are arrays of tables)."""
    merged: dict[str, dict[str, Any]] = {k: dict(v) for k, v in DEFAULT_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "security.toml"
    config_path.write_text(to_toml(merged) + extra_toml)
    return launch_broker(workdir, extra_args=["--config", str(config_path), *extra_args], env=env)


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


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with authentication on and one super user (ADMIN_KEY)."""
    proc = start_with(tmp_path_factory.mktemp("auth"), extra_toml=AUTH_TOML)
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])
