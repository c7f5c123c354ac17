"""The examples run: the end-to-end demo on the session SparkSession and its own broker."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from examples import e2e_demo
from tests.connector.conftest import spark  # noqa: F401


def test_e2e_demo_totals_match_the_events(spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    with e2e_demo.demo_broker() as endpoints:
        table = e2e_demo.run_demo(spark, endpoints, tmp_path, events=1200)
        rows = table.collect()
    assert sum(r["orders"] for r in rows) == 1200
    assert {r["status"] for r in rows} == set(e2e_demo.STATUSES)
    assert 10 <= len({r["minute"] for r in rows}) <= 11
