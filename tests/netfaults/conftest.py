"""Fixtures for network-fault tests: a ``Network`` of namespaces, removed after each test
(whether it passed or not); leftovers of a crashed earlier run are swept first."""

from __future__ import annotations

from collections.abc import Iterator

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
