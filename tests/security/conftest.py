"""Fixtures of the security and observability tests: real broker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.conftest import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])
