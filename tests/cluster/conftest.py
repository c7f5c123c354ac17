"""A real cluster for the tests of this package: a NameServer and brokers a, b, c.

Fast intervals so membership changes show in well under a second: brokers re-register
every 500 ms and cache routes for 300 ms; the NameServer scans every 200 ms and drops
a broker 3 s after its last heartbeat (at once when its connection closes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.cluster.local import LocalCluster
from tests.server.conftest import DEFAULT_CONFIG

NAMESRV_ARGS = ["--scan-interval-ms", "200", "--broker-expiry-ms", "3000"]
BROKER_ARGS = ["--route-ttl-ms", "300"]


def start_cluster(directory: Path, brokers: int, **config: Any) -> LocalCluster:
    """A started NameServer plus ``brokers`` broker groups (broker-a, broker-b, ...)."""
    local = LocalCluster(
        directory,
        broker_config=DEFAULT_CONFIG,
        register_interval_ms=500,
        broker_args=BROKER_ARGS,
        **config,
    )
    return local.start(brokers, namesrv_args=NAMESRV_ARGS)


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_cluster(tmp_path_factory.mktemp("cluster"), 3)
    yield local
    local.stop()
    for name, proc in local.brokers.items():
        assert proc.process.returncode == 0, (name, "".join(proc.output[-40:]))
