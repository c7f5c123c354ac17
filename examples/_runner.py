"""What every option example shares: its own broker in a temp dir, and a Spark session."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from broker_core.server.launcher import launch_broker
from spark_jobs.common import session


def run_example(
    app_name: str,
    run: Callable[..., Any],
    spark: SparkSession | None = None,
    *,
    checkpoint: bool = False,
) -> int:
    """Start a broker, call ``run(spark, endpoint[, checkpoint dir])``, then stop the broker
    (and the session, if this made it)."""
    own = spark is None
    active = spark or session(app_name)
    with tempfile.TemporaryDirectory() as tmp:
        broker = launch_broker(Path(tmp) / "broker")
        try:
            extra = (Path(tmp) / "checkpoint",) if checkpoint else ()
            run(active, broker.endpoint, *extra)
        finally:
            broker.stop()
    if own:
        active.stop()
    return 0
