"""Spark's static registration hook for the ``rocketmq`` data source.

Spark (4.0+) imports every top-level module named ``pyspark_*`` on the Python path and
registers its ``DefaultSource`` under ``DefaultSource.name()``, so after installing this
project ``spark.read.format("rocketmq")`` works without ``spark.dataSource.register``.
"""

from connector.datasource import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
