"""What every job shares: the SparkSession and waiting for a query (``args.py``: the
command line).

``session(app_name, master)`` respects a master chosen by ``spark-submit`` (it never
overrides one), defaults to ``local[2]`` when run with ``python -m``, and points Spark's
Python workers at this interpreter when ``PYSPARK_PYTHON`` is unset (so they can import
``connector`` and ``pyspark_rocketmq``). A local session gets 4 shuffle partitions (a
stateful query keeps that number in its checkpoint) and the UI off. Under ``spark-submit``
a local master gets the same 4 shuffle partitions unless ``--conf`` gave a number (Spark's
200 make a small local job's every micro-batch run 200 tasks), and the JVM's log level is
WARN from before the SparkContext starts (``--conf spark.log.level=INFO`` brings the INFO
lines back).
"""

from __future__ import annotations

import os
import sys
from typing import Final

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

DEFAULT_MASTER: Final = "local[2]"
LOCAL_SHUFFLE_PARTITIONS: Final = "4"
SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"


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
            .config(SHUFFLE_PARTITIONS, LOCAL_SHUFFLE_PARTITIONS)
        )
    else:
        _quiet_jvm_logs()
    # The rocketmq batch reader implements pushFilters, which Spark refuses to plan
    # unless Python filter pushdown is on.
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    _local_shuffle_partitions(spark)
    return spark


def _quiet_jvm_logs() -> None:
    """Under spark-submit: the JVM (already running) logs WARN and up from now on, so the
    SparkContext's start-up does not flood the console with INFO lines."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # spark-submit's gateway, before any SparkContext
    jvm = SparkContext._jvm
    if jvm is None:  # no gateway: nothing to quieten
        return
    submitted = jvm.org.apache.spark.SparkConf(True)  # spark-submit's settings
    if submitted.contains("spark.log.level"):
        return  # the user's choice
    # Spark sets its logging up at its first log line, resetting the root level to INFO:
    # have it do so now, then lower the level.
    submitted.initializeLogIfNecessary(False)
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setRootLevel(log4j.Level.WARN)


def _local_shuffle_partitions(spark: SparkSession) -> None:
    """A local master (spark-submit's ``--master local[N]``) with no shuffle partition
    count of its own gets :data:`LOCAL_SHUFFLE_PARTITIONS`, as ``python -m`` runs do."""
    context = spark.sparkContext
    local = (context.master or "").startswith("local")
    if local and not context.getConf().contains(SHUFFLE_PARTITIONS):
        spark.conf.set(SHUFFLE_PARTITIONS, LOCAL_SHUFFLE_PARTITIONS)


def finish(query: StreamingQuery) -> StreamingQuery:
    """Wait for a streaming query to end (availableNow ends by itself); raise its failure."""
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise failure
    return query
