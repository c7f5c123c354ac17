"""/metrics after a known workload: exact counts per topic, lag per group, latency, storage;
the Grafana dashboard's queries name metrics the broker exports."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_core.client import RocketMQClient
from tests.security.conftest import metrics_url, start_with
from tests.server.conftest import BrokerProcess

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(
        tmp_path_factory.mktemp("metrics"), extra_args=["--metrics-listen", "127.0.0.1:0"]
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    assert len(found) == 1, f"{name}{labels}: {len(found)} series"
    return found[0]


def test_counts_lag_latency_and_storage(metered: BrokerProcess) -> None:
    with RocketMQClient(metered.endpoint) as client:
        client.create_topic("m-orders", queues=1)
        client.create_topic("m-other", queues=1)
        client.create_group("GID_metrics")
        client.send_batch("m-orders", [(b"x" * 10,)] * 40)  # the column fast lane
        for _ in range(3):
            client.send_batch("m-orders", [(b"abcd",)])  # the general lane
        client.send_batch("m-other", [(b"12345",)] * 5)
        batch = client.pull("GID_metrics", "m-orders", 0, 0, 30)
        client.update_offset("GID_metrics", "m-orders", 0, batch.next_offset)
    samples = scrape(metrics_url(metered))
    node = {"cluster": "DefaultCluster", "node_id": "broker-a"}
    assert value(samples, "rocketmq_messages_in_total", topic="m-orders", **node) == 43
    assert value(samples, "rocketmq_throughput_in_total", topic="m-orders") == 40 * 10 + 3 * 4
    assert value(samples, "rocketmq_messages_in_total", topic="m-other") == 5
    assert (
        value(
            samples, "rocketmq_messages_out_total", topic="m-orders", consumer_group="GID_metrics"
        )
        == 30
    )
    assert (
        value(
            samples, "rocketmq_throughput_out_total", topic="m-orders", consumer_group="GID_metrics"
        )
        == 300
    )
    assert (
        value(
            samples,
            "rocketmq_consumer_lag_messages",
            topic="m-orders",
            consumer_group="GID_metrics",
        )
        == 13
    )
    assert (
        value(
            samples,
            "rocketmq_consumer_ready_messages",
            topic="m-orders",
            consumer_group="GID_metrics",
        )
        == 13
    )
    assert value(samples, "rocketmq_rpc_latency_count", method="SendMessage") == 5
    assert value(samples, "rocketmq_rpc_latency_bucket", method="SendMessage", le="+Inf") == 5
    assert value(samples, "rocketmq_storage_size", **node) > 0
    assert value(samples, "rocketmq_storage_flush_latency", **node) >= 0


def _exported_names(samples) -> set[str]:
    names = {name for name, _ in samples}
    return names | {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


def test_grafana_dashboard_queries_name_exported_metrics(metered: BrokerProcess) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = _exported_names(scrape(metrics_url(metered)))
    queries = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    assert len(queries) >= 6
    used = {m for q in queries for m in re.findall(r"\brocketmq_[a-z_]+", q)}
    assert used, "the dashboard queries no rocketmq metric"
    assert used <= exported, f"unknown metrics in the dashboard: {sorted(used - exported)}"
    for name in (
        "rocketmq_messages_in_total",
        "rocketmq_consumer_lag_messages",
        "rocketmq_rpc_latency_bucket",
        "rocketmq_storage_size",
    ):
        assert any(name in q for q in queries), name


def test_official_simple_consumer_deliveries_are_counted(metered: BrokerProcess) -> None:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Producer,
        SimpleConsumer,
    )

    from tests.server.test_pull_and_offsets import client_message

    with RocketMQClient(metered.endpoint) as client:
        client.create_topic("m-pop", queues=1)
        client.create_group("GID_pop", consume_from_where="first_offset")
    config = ClientConfiguration(metered.endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, ("m-pop",))
    producer.startup()
    try:
        for i in range(3):
            producer.send(client_message("m-pop", f"pop-{i}".encode()))
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(config, "GID_pop", {"m-pop": FilterExpression()}, await_duration=2)
    consumer.startup()
    try:
        got: list = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            got += consumer.receive(16, 30)
        assert len(got) == 3
        consumer.ack(sorted(got, key=lambda m: m.body)[-1])
        samples = scrape(metrics_url(metered))
    finally:
        consumer.shutdown()
    group = {"topic": "m-pop", "consumer_group": "GID_pop"}
    assert value(samples, "rocketmq_consumer_lag_messages", **group) == 3  # offset 0 not acked
    assert value(samples, "rocketmq_consumer_inflight_messages", **group) == 2
    assert value(samples, "rocketmq_consumer_ready_messages", **group) == 0  # all delivered
    assert value(samples, "rocketmq_messages_in_total", topic="m-pop") == 3
    assert (
        value(samples, "rocketmq_messages_out_total", topic="m-pop", consumer_group="GID_pop") == 3
    )
    assert value(
        samples, "rocketmq_throughput_out_total", topic="m-pop", consumer_group="GID_pop"
    ) == 3 * len(b"pop-0")
    assert value(samples, "rocketmq_rpc_latency_count", method="ReceiveMessage") >= 1
