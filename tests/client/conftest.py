"""Shared fixtures of the client tests: one broker process per module and a client of it.

Modules that need a broker set up differently (prefilled, other limits) define their own
``broker`` and ``client``, which take precedence over these.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("client"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint, timeout_s=10) as c:
        yield c
