"""Spark pipelines over RocketMQ topics, runnable with ``spark-submit`` or ``python -m``.

* :mod:`spark_jobs.order_events` — order-event JSON → revenue per status per minute → topic.
* :mod:`spark_jobs.archive` — a topic → date-partitioned Parquet, exactly once.
* :mod:`spark_jobs.dlq_replay` — a group's dead-letter queue → fixed/filtered → original topics.

Each module has ``main(argv)`` (argparse, ``--help``) and a function taking a
SparkSession that tests and demos call directly.
"""
