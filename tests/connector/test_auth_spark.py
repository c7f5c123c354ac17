"""Spark reads and writes a broker with authentication on, with accessKey/secretKey."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from tests.connector.conftest import read_batch
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess

WRITER = {"accessKey": "spark", "secretKey": "spark-secret-42"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_with(tmp_path_factory.mktemp("spark-auth"), extra_toml=AUTH_TOML)
    with RocketMQClient(proc.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as admin:
        admin.create_topic("spark-orders", queues=2)
        admin.create_user("spark", "spark-secret-42")
        admin.create_acl("spark", "Topic:spark-orders", ["Pub", "Sub", "Get"])
        admin.create_acl("spark", "Group:spark-*", ["Sub"])
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def test_spark_writes_and_reads_with_keys(spark: SparkSession, secured: BrokerProcess) -> None:
    rows = [(f"row-{i}".encode(),) for i in range(20)]
    spark.createDataFrame(rows, "body binary").write.format("rocketmq") \
        .option("endpoints", secured.endpoint).option("topic", "spark-orders") \
        .options(**WRITER).mode("append").save()  # fmt: skip
    got = read_batch(spark, secured.endpoint, topic="spark-orders", **WRITER).collect()
    assert sorted(bytes(r.body) for r in got) == sorted(body for (body,) in rows)
    with pytest.raises(Exception, match="not signed"):
        read_batch(spark, secured.endpoint, topic="spark-orders").collect()
    with pytest.raises(Exception, match="wrong secret key"):
        read_batch(spark, secured.endpoint, topic="spark-orders", accessKey="spark",
                   secretKey="not-the-secret").collect()
    assert not any("spark-secret-42" in line for line in secured.output)
