"""Several brokers given by ``endpoints="a,b"``: the source keys queues by broker name and
the sink spreads rows over every broker (issue 13 items 12 and 13)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from broker_core.client import ReceivedMessage, RocketMQClient
from connector.sink_route import spread, stable_index
from tests.connector.conftest import BrokerProcess, read_batch, start_broker


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, ...]]:
    """Two brokers named broker-a and broker-b."""
    procs = tuple(
        start_broker(
            tmp_path_factory.mktemp(f"multi-{name}"), config={"broker": {"broker_name": name}}
        )
        for name in ("broker-a", "broker-b")
    )
    yield procs
    for proc in procs:
        assert proc.stop() == 0, "".join(proc.output[-50:])


def endpoints(*procs: BrokerProcess) -> str:
    return ",".join(p.endpoint for p in procs)


def read_all(endpoint: str, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic`` on one broker, queue by queue in offset order."""
    out: list[ReceivedMessage] = []
    with RocketMQClient(endpoint) as client:
        for queue in client.topic_status(topic):
            offset, end = queue["min_offset"], queue["max_offset"]
            while offset < end:
                batch = client.pull("multi-tests", topic, queue["queue_id"], offset, 1024)
                out.extend(batch.messages)
                offset = batch.next_offset
    return out


def create_everywhere(topic: str, *procs: BrokerProcess, queues: int = 2) -> None:
    for proc in procs:
        with RocketMQClient(proc.endpoint) as client:
            client.create_topic(topic, queues=queues)


def test_two_brokers_with_the_same_name_are_refused(
    spark: SparkSession,
    pair: tuple[BrokerProcess, ...],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    twin = start_broker(tmp_path_factory.mktemp("multi-twin"))  # default name: broker-a
    try:
        create_everywhere("dup-names", pair[0], twin)
        for proc, count in ((pair[0], 20), (twin, 7)):
            with RocketMQClient(proc.endpoint) as client:
                client.send_batch("dup-names", [f"m{i}".encode() for i in range(count)])
        with pytest.raises(PySparkException, match="are both named broker 'broker-a'"):
            read_batch(spark, endpoints(pair[0], twin), topic="dup-names").collect()
    finally:
        assert twin.stop() == 0, "".join(twin.output[-50:])


def test_source_reads_every_broker_with_its_name(
    spark: SparkSession, pair: tuple[BrokerProcess, ...]
) -> None:
    create_everywhere("multi-read", *pair)
    for proc, count in zip(pair, (20, 7), strict=True):
        with RocketMQClient(proc.endpoint) as client:
            client.send_batch("multi-read", [f"{proc.endpoint}-{i}".encode() for i in range(count)])
    rows = read_batch(spark, endpoints(*pair), topic="multi-read").collect()
    assert len(rows) == 27
    got = sorted((r.broker, bytes(r.body).decode()) for r in rows)
    assert got == sorted(
        [("broker-a", f"{pair[0].endpoint}-{i}") for i in range(20)]
        + [("broker-b", f"{pair[1].endpoint}-{i}") for i in range(7)]
    )


def test_sink_spreads_rows_over_every_endpoint(
    spark: SparkSession, pair: tuple[BrokerProcess, ...]
) -> None:
    create_everywhere("multi-sink", *pair, queues=2)
    df = spark.createDataFrame([(f"r{i}",) for i in range(200)], "body string").repartition(2)
    df.write.format("rocketmq").option("endpoints", endpoints(*pair)).option(
        "topic", "multi-sink"
    ).option("batchSize", "16").mode("append").save()
    per_broker = [read_all(p.endpoint, "multi-sink") for p in pair]
    bodies = sorted(m.body.decode() for got in per_broker for m in got)
    assert bodies == sorted(f"r{i}" for i in range(200))
    sizes = [len(got) for got in per_broker]
    assert abs(sizes[0] - sizes[1]) <= 2, sizes  # round robin within each of the 2 tasks
    for got in per_broker:  # and each broker spreads its rows over its queues
        assert {m.queue_id for m in got} == {0, 1}


def test_sink_pins_each_message_group_to_one_broker_and_queue(
    spark: SparkSession, pair: tuple[BrokerProcess, ...]
) -> None:
    create_everywhere("multi-fifo", *pair, queues=4)
    groups = [f"g{n}" for n in range(8)]
    rows = [(f"{g}-{seq:03d}", g) for seq in range(30) for g in groups]
    df = spark.createDataFrame(rows, "body string, messageGroup string").coalesce(1)
    df.write.format("rocketmq").option("endpoints", endpoints(*pair)).option(
        "topic", "multi-fifo"
    ).option("batchSize", "10").mode("append").save()
    placed: dict[str, set[tuple[int, int]]] = {}
    order: dict[str, list[str]] = {}
    for index, proc in enumerate(pair):
        for m in read_all(proc.endpoint, "multi-fifo"):
            assert m.message_group is not None
            placed.setdefault(m.message_group, set()).add((index, m.queue_id))
            order.setdefault(m.message_group, []).append(m.body.decode())
    assert sorted(placed) == groups
    assert all(len(where) == 1 for where in placed.values()), placed
    assert {index for where in placed.values() for index, _ in where} == {0, 1}
    for group, bodies in order.items():  # read in offset order: sent in row order
        assert bodies == [f"{group}-{seq:03d}" for seq in range(30)]


def test_spread_is_round_robin_and_pins_message_groups() -> None:
    groups = [None, "g1", None, "g2", "g1", None, None]
    for start in range(5):
        parts = spread(3, len(groups), groups, start=start)
        assert sorted(row for part in parts for row in part) == list(range(len(groups)))
        assert all(part == sorted(part) for part in parts)  # row order kept per broker
        for group in ("g1", "g2"):
            rows = [i for i, g in enumerate(groups) if g == group]
            assert set(rows) <= set(parts[stable_index(group, 3)])  # whatever the start
    assert spread(2, 6, None, start=1) == [[1, 3, 5], [0, 2, 4]]
