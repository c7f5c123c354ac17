"""What every job shares: the SparkSession and argument checks.

``session(app_name, master)`` respects a master chosen by ``spark-submit`` (it never
overrides one), defaults to ``local[2]`` when run with ``python -m``, and points Spark's
Python workers at this interpreter when ``PYSPARK_PYTHON`` is unset (so they can import
``connector`` and ``pyspark_rocketmq``). A local session gets 4 shuffle partitions (a
stateful query keeps that number in its checkpoint) and the UI off.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

DEFAULT_MASTER: Final = "local[2]"


def under_spark_submit() -> bool:
    """True when spark-submit started this process (it hands over a gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session(app_name: str, master: str | None = None) -> SparkSession:
    """The active SparkSession or a new one (see the module docstring for the master)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local run stays on loopback
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = (
            builder.master(DEFAULT_MASTER)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
        )
    # The rocketmq batch reader implements pushFilters, which Spark refuses to plan
    # unless Python filter pushdown is on.
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--endpoints`` (required) and ``--master``."""
    parser.add_argument("--endpoints", required=True, help="broker host:port[,host:port]")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[2])"
    )


def finish(query: StreamingQuery) -> StreamingQuery:
    """Wait for a streaming query to end (availableNow ends by itself); raise its failure."""
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise failure
    return query
