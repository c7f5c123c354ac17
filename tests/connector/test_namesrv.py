"""``format("rocketmq")`` with ``namesrv``: queues routed per broker group (issue 12 item 5).

A real cluster (a NameServer and brokers broker-a, broker-b, broker-c registering every
500 ms); topics are created per group with ``create_topic_everywhere`` (which returns
once the route lists them) and filled by sending to each broker directly, so where every
message lives is known.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from broker_core.cli_cluster import create_topic_everywhere
from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster
from broker_core.errors import ConfigError, TopicNotFoundError
from broker_core.namesrv.client import NameServerClient
from connector.options import parse_read_options
from connector.sink_options import parse_sink_options
from tests.cluster.conftest import start_cluster
from tests.cluster_procs import send_numbered
from tests.connector.conftest import run_available_now

GROUPS = ("broker-a", "broker-b", "broker-c")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_cluster(tmp_path_factory.mktemp("ns-cluster"), 3)
    yield local
    local.stop()


def create(cluster: LocalCluster, topic: str, groups: tuple[str, ...], queues: int = 4) -> None:
    for group in groups:
        create_topic_everywhere(cluster.namesrv, group, topic, queues=queues)


def send(cluster: LocalCluster, topic: str, group: str, prefix: str, count: int) -> None:
    with RocketMQClient(cluster.endpoints[group]) as client:
        client.send_batch(topic, [f"{group}/{prefix}-{i}".encode() for i in range(count)])


def route_groups(cluster: LocalCluster, topic: str) -> set[str]:
    ns = NameServerClient(cluster.namesrv)
    try:
        return {q.broker_name for q in ns.get_route(topic).queue_datas}
    except TopicNotFoundError:
        return set()
    finally:
        ns.close()


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def stream(spark: SparkSession, cluster: LocalCluster, topic: str, **options: str) -> DataFrame:
    return (
        spark.readStream.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )


def test_batch_read_over_three_broker_groups_returns_every_row_once(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create(cluster, "ns-batch", GROUPS)
    for group, count in zip(GROUPS, (50, 30, 20), strict=True):
        send(cluster, "ns-batch", group, "m", count)
    rows = (
        spark.read.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", "ns-batch")
        .load()
        .collect()
    )
    got = sorted((r.broker, bytes(r.body).decode()) for r in rows)
    wanted = sorted(
        (g, f"{g}/m-{i}") for g, n in zip(GROUPS, (50, 30, 20), strict=True) for i in range(n)
    )
    assert got == wanted  # every row exactly once, with the group that holds it
    assert len({(r.broker, r.queueId, r.queueOffset) for r in rows}) == 100


@pytest.mark.parametrize("count", [300, pytest.param(30_000, marks=pytest.mark.slow)])
def test_official_producer_through_one_broker_then_spark_reads_every_message_once(
    spark: SparkSession, cluster: LocalCluster, count: int
) -> None:
    """Issue 12's acceptance: sent through broker-a's endpoint only, read via namesrv."""
    topic = f"ns-official-{count}"
    create(cluster, topic, GROUPS)
    send_numbered(cluster.endpoints["broker-a"], topic, count, timeout_s=120)
    held = {}
    for group in GROUPS:
        with RocketMQClient(cluster.endpoints[group]) as client:
            held[group] = sum(q["max_offset"] - q["min_offset"] for q in client.topic_status(topic))
    assert sum(held.values()) == count and all(held.values()), held  # on every group
    rows = (
        spark.read.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .load()
        .groupBy("broker", "body")
        .count()
        .collect()
    )
    assert len(rows) == count and all(r["count"] == 1 for r in rows)  # each exactly once
    assert sorted(bytes(r.body) for r in rows) == [b"m-%06d" % i for i in range(count)]
    assert dict(collections.Counter(r.broker for r in rows)) == held  # the right group


def test_stream_over_two_groups_restarted_reads_only_the_new_messages(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create(cluster, "ns-stream", GROUPS[:2])
    send(cluster, "ns-stream", "broker-a", "old", 20)
    send(cluster, "ns-stream", "broker-b", "old", 10)
    columns = ("broker", "queueId", "queueOffset", "body")
    first = run_available_now(
        stream(spark, cluster, "ns-stream", maxMessagesPerTrigger="12"), tmp_path / "cp", columns
    )
    assert sorted(bytes(r.body).decode() for r in first.rows) == sorted(
        [f"broker-a/old-{i}" for i in range(20)] + [f"broker-b/old-{i}" for i in range(10)]
    )
    send(cluster, "ns-stream", "broker-a", "new", 7)
    send(cluster, "ns-stream", "broker-b", "new", 5)
    again = run_available_now(stream(spark, cluster, "ns-stream"), tmp_path / "cp", columns)
    assert sorted((r.broker, bytes(r.body).decode()) for r in again.rows) == sorted(
        [("broker-a", f"broker-a/new-{i}") for i in range(7)]
        + [("broker-b", f"broker-b/new-{i}") for i in range(5)]
    )
    offsets = json.loads(
        (
            tmp_path
            / "cp"
            / "offsets"
            / max(
                (p.name for p in (tmp_path / "cp" / "offsets").iterdir() if p.name.isdigit()),
                key=int,
            )
        )
        .read_text()
        .splitlines()[-1]
    )
    labels = set(offsets["ns-stream"])
    assert {label.rpartition(":")[0] for label in labels} == {"broker-a", "broker-b"}


def test_a_group_that_joins_later_is_read_from_its_first_offset(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create(cluster, "ns-join", ("broker-a",))
    send(cluster, "ns-join", "broker-a", "x", 6)
    first = run_available_now(stream(spark, cluster, "ns-join"), tmp_path / "cp", ("body",))
    assert len(first.rows) == 6
    create(cluster, "ns-join", ("broker-c",))
    send(cluster, "ns-join", "broker-c", "y", 4)
    again = run_available_now(
        stream(spark, cluster, "ns-join"), tmp_path / "cp", ("broker", "queueOffset", "body")
    )
    assert sorted((r.broker, bytes(r.body).decode()) for r in again.rows) == [
        ("broker-c", f"broker-c/y-{i}") for i in range(4)
    ]


def test_a_group_that_leaves_is_reported_as_data_loss(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    leaving = cluster.add_broker("broker-gone")
    try:
        create(cluster, "ns-leave", ("broker-a", "broker-gone"))
        send(cluster, "ns-leave", "broker-a", "a", 3)
        send(cluster, "ns-leave", "broker-gone", "g", 3)
        first = run_available_now(stream(spark, cluster, "ns-leave"), tmp_path / "cp", ("body",))
        assert len(first.rows) == 6
    finally:
        assert leaving.stop() == 0  # SIGTERM: it unregisters
    wait_until(
        lambda: route_groups(cluster, "ns-leave") == {"broker-a"},
        15,
        "broker-gone to leave the route",
    )
    send(cluster, "ns-leave", "broker-a", "b", 2)
    with pytest.raises(PySparkException, match="possible data loss: ns-leave broker-gone:0"):
        run_available_now(stream(spark, cluster, "ns-leave"), tmp_path / "cp", ("body",))
    allowed = run_available_now(
        stream(spark, cluster, "ns-leave", failOnDataLoss="false"), tmp_path / "cp", ("body",)
    )
    assert sorted(bytes(r.body).decode() for r in allowed.rows) == ["broker-a/b-0", "broker-a/b-1"]


def test_sink_spreads_rows_over_the_route_and_pins_message_groups(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create(cluster, "ns-sink", GROUPS)
    plain = [(f"p{i}", None) for i in range(300)]
    fifo = [(f"{g}-{seq:03d}", g) for seq in range(20) for g in ("ga", "gb", "gc", "gd", "ge")]
    df = spark.createDataFrame(plain + fifo, "body string, messageGroup string").coalesce(1)
    df.write.format("rocketmq").option("namesrv", cluster.namesrv).option(
        "topic", "ns-sink"
    ).option("batchSize", "50").mode("append").save()
    rows = (
        spark.read.format("rocketmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", "ns-sink")
        .load()
        .collect()
    )
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(b for b, _ in plain + fifo)
    per_group = {
        g: sum(1 for r in rows if r.broker == g and r.messageGroup is None) for g in GROUPS
    }
    assert all(90 <= n <= 110 for n in per_group.values()), per_group
    placed: dict[str, set[tuple[str, int]]] = {}
    for r in sorted(rows, key=lambda r: (r.broker, r.queueId, r.queueOffset)):
        if r.messageGroup is not None:
            placed.setdefault(r.messageGroup, set()).add((r.broker, r.queueId))
            assert bytes(r.body).decode().startswith(r.messageGroup)
    assert all(len(where) == 1 for where in placed.values()), placed  # one queue per group
    order = [
        bytes(r.body).decode()
        for r in sorted((r for r in rows if r.messageGroup == "ga"), key=lambda r: r.queueOffset)
    ]
    assert order == [f"ga-{seq:03d}" for seq in range(20)]


def test_sink_refuses_a_topic_without_a_route(spark: SparkSession, cluster: LocalCluster) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(PySparkException, match="has no writable broker group"):
        df.write.format("rocketmq").option("namesrv", cluster.namesrv).option(
            "topic", "ns-nowhere"
        ).mode("append").save()


@pytest.mark.parametrize(
    "options",
    [
        {"endpoints": "127.0.0.1:1", "namesrv": "127.0.0.1:2", "topic": "t"},
        {"topic": "t"},
        {"namesrv": "nohost", "topic": "t"},
        {"namesrv": "127.0.0.1:2;", "topic": "t"},
    ],
)
def test_source_takes_exactly_one_of_endpoints_and_namesrv(options: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="namesrv"):
        parse_read_options(options, streaming=False)


def test_sink_option_errors() -> None:
    assert parse_sink_options({"namesrv": "127.0.0.1:1, 127.0.0.1:2"}).namesrv == (
        "127.0.0.1:1;127.0.0.1:2"
    )
    with pytest.raises(ConfigError, match="exactly one"):
        parse_sink_options({"namesrv": "127.0.0.1:1", "endpoints": "127.0.0.1:2"})
    with pytest.raises(ConfigError, match="exactlyOnce=true writes through one broker"):
        parse_sink_options({"namesrv": "127.0.0.1:1", "exactlyOnce": "true"})
