"""A real broker process on a loopback port, shared by a test module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.client import RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker

__all__ = [
    "DEFAULT_CONFIG",
    "BrokerProcess",
    "await_nothing_more",
    "await_parked_receive",
    "broker_process",
    "start_broker",
]

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


# ---- the broker's own signals, instead of sleeps ------------------------------------------


def parked_receives(client: RocketMQClient, group: str) -> tuple[int, int]:
    """(receives of ``group`` the broker holds parked now, parks begun since it started)."""
    parked = client.health()["parked"]["receives"]
    return parked["now"].get(group, 0), parked["total"].get(group, 0)


def _poll(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def await_parked_receive(client: RocketMQClient, group: str, timeout_s: float = 10) -> None:
    """Return once a receive of ``group`` is parked in the broker (a long poll waiting)."""
    _poll(lambda: parked_receives(client, group)[0] > 0, timeout_s, f"a parked {group} receive")


def await_nothing_more(client: RocketMQClient, group: str, timeout_s: float = 20) -> None:
    """Return once the broker says it has nothing more for ``group``: no delivery of it in
    flight (every message handed out was acked) and a receive of it parked *after* this
    call began — it looked at every message dispatched by then and found none to give.

    Call it after the messages that must not arrive were sent (and dispatched)."""
    _, before = parked_receives(client, group)
    _poll(
        lambda: (
            parked_receives(client, group)[1] > before
            and client.group_progress(group)["inflight"] == 0
        ),
        timeout_s,
        f"the broker to have nothing more for {group}",
    )
