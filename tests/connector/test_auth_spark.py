"""Spark reads and writes a broker with authentication and TLS on, with the options
accessKey/secretKey and caFile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from broker_core.client import RocketMQClient
from tests.connector.conftest import read_batch
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.security.pki import Pki, make_pki, tls_toml
from tests.server.conftest import BrokerProcess

SECRET = "spark-secret-42"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("spark-pki"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProcess]:
    proc = start_with(tmp_path_factory.mktemp("spark-auth"), extra_toml=AUTH_TOML + tls_toml(pki))
    with RocketMQClient(
        proc.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET, ca_file=str(pki.ca)
    ) as admin:
        admin.create_topic("spark-orders", queues=2)
        admin.create_user("spark", SECRET)
        admin.create_acl("spark", "Topic:spark-orders", ["Pub", "Sub", "Get"])
        admin.create_acl("spark", "Group:spark-*", ["Sub"])
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def test_spark_writes_and_reads_with_keys_over_tls(
    spark: SparkSession, secured: BrokerProcess, pki: Pki
) -> None:
    access = {"accessKey": "spark", "secretKey": SECRET, "caFile": str(pki.ca)}
    rows = [(f"row-{i}".encode(),) for i in range(20)]
    spark.createDataFrame(rows, "body binary").write.format("rocketmq").option(
        "endpoints", secured.endpoint
    ).option("topic", "spark-orders").options(**access).mode("append").save()
    got = read_batch(spark, secured.endpoint, topic="spark-orders", **access).collect()
    assert sorted(bytes(r.body) for r in got) == sorted(body for (body,) in rows)
    with pytest.raises(Exception, match="not signed"):
        read_batch(spark, secured.endpoint, topic="spark-orders", caFile=str(pki.ca)).collect()
    with pytest.raises(Exception, match="wrong secret key"):
        read_batch(
            spark,
            secured.endpoint,
            topic="spark-orders",
            accessKey="spark",
            secretKey="not-the-secret",
            caFile=str(pki.ca),
        ).collect()
    assert not any(SECRET in line for line in secured.output)
