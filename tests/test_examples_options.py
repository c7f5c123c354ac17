"""Each option-family example runs in-process on the session SparkSession, own broker."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from examples import (
    batch_read,
    consumer_group,
    exactly_once,
    filters,
    kafka_habits,
    stream_read,
    write,
)
from tests.connector.conftest import spark  # noqa: F401


def test_batch_read(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert batch_read.main(spark) == 0
    out = capsys.readouterr().out
    assert "offsets [3, 7): ['early-3', 'early-4', 'late-0', 'late-1']" in out
    assert "since timestamp: ['late-0', 'late-1', 'late-2', 'late-3', 'late-4']" in out


def test_stream_read(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert stream_read.main(spark) == 0
    assert "batch sizes: [10, 10, 5]" in capsys.readouterr().out


def test_filters(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert filters.main(spark) == 0
    out = capsys.readouterr().out
    assert "tagExpression='A': ['e-0', 'e-2', 'e-4', 'e-6']" in out
    assert "TAGS = 'B'\": ['e-1', 'e-3']" in out


def test_write(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert write.main(spark) == 0
    out = capsys.readouterr().out
    assert '{"id":5,"ccy":"EUR"}' in out and "[pay-5]" in out and "{source -> example}" in out


def test_exactly_once(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert exactly_once.main(spark) == 0
    out = capsys.readouterr().out
    assert "run 1: batches [8, 8, 4]" in out and "messages in 'clean': 20" in out


def test_consumer_group(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert consumer_group.main(spark) == 0
    out = capsys.readouterr().out
    assert "total lag: 0" in out and "committed 6, lag 0" in out


def test_kafka_habits(spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert kafka_habits.main(spark) == 0
    out = capsys.readouterr().out
    assert "subscribe + minPartitions=4: 4 partitions, 16 rows" in out
    assert "assign broker-a:1: 8 rows from queues [1]" in out
    assert "startingOffsets=group after a reset to latest: ['new-0', 'new-1']" in out
