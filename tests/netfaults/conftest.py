"""Fixtures for network-fault tests: a ``Network`` of namespaces, removed after each test
(whether it passed or not); leftovers of a crashed earlier run are swept first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.netfaults import net


@pytest.fixture(scope="session")
def netns_ready() -> None:
    reason = net.unavailable()
    if reason:
        pytest.skip(f"network namespaces cannot be made here: {reason}")
    net.sweep()


@pytest.fixture
def network(netns_ready: None) -> Iterator[net.Network]:
    network = net.Network().start()
    try:
        yield network
    finally:
        network.close()


_SUMMARIES: list[tuple[str, str]] = []


@pytest.fixture
def chaos_figures() -> Callable[..., None]:
    """Record a scenario's history summary: printed now, listed at the end of the run."""

    def record(name: str, summary: str) -> None:
        _SUMMARIES.append((name, summary))
        print(f"\nNETFAULTS {name}: {summary}")

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SUMMARIES:
        terminalreporter.section("network-fault scenarios")
        for name, summary in _SUMMARIES:
            terminalreporter.write_line(f"{name}: {summary}")
