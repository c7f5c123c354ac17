"""The console of a 2-group cluster (``--namesrv``): both broker groups on the overview,
a topic created from the page on both, and its messages counted across them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster
from broker_core.console.server import ConsoleServer, start_console
from tests.cluster.conftest import start_cluster
from tests.cluster.test_cluster import route_brokers, wait_for
from tests.console.conftest import open_page, shot


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_cluster(tmp_path_factory.mktemp("console-cluster"), 2)
    yield local
    local.stop()
    for name, proc in local.brokers.items():
        assert proc.process.returncode == 0, (name, "".join(proc.output[-40:]))


@pytest.fixture(scope="module")
def console(cluster: LocalCluster) -> Iterator[ConsoleServer]:
    server = start_console("127.0.0.1:0", namesrv=cluster.namesrv)
    yield server
    server.stop()


def test_overview_topic_creation_and_counts_span_both_broker_groups(
    browser: Browser, console: ConsoleServer, cluster: LocalCluster
) -> None:
    page, errors = open_page(browser, console.url)
    page.goto("/")
    for name, endpoint in cluster.endpoints.items():
        expect(page.locator(f"#brokers tr[data-broker='{name}']")).to_contain_text(endpoint)
    shot(page, "cluster")
    page.goto("/topics")
    page.fill("#create-topic input[name=name]", "spread")
    page.fill("#create-topic input[name=queues]", "2")
    page.click("#create-topic button")
    page.wait_for_url("**/topics/spread")
    expected = {name: 2 for name in cluster.brokers}
    for endpoint in cluster.endpoints.values():
        wait_for(lambda e=endpoint: route_brokers(e, "spread") == expected, 10, "the route")
    with RocketMQClient(namesrv=cluster.namesrv) as client:
        for i in range(6):
            client.send("spread", f"m{i}")  # sends rotate over the broker groups
    page.goto("/topics")
    row = page.locator("#topics tr[data-topic='spread']")
    expect(row.locator(".messages")).to_have_text("6")
    expect(row).to_contain_text("broker-a, broker-b")
    page.goto("/topics/spread")
    expect(page.locator("#message-count")).to_have_text("6")
    expect(page.locator("#queues tr")).to_have_count(1 + 4)  # 2 queues on each group
    assert errors.seen == []
    page.context.close()
