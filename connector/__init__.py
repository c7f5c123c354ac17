"""The Spark data source ``rocketmq``: read and write RocketMQ topics from Spark.

>>> from connector import RocketMQDataSource
>>> RocketMQDataSource.name()
'rocketmq'

See :mod:`connector.datasource` for usage, :mod:`connector.options` for read options.
"""

from connector.arrow import SCHEMA
from connector.datasource import RocketMQDataSource

__all__ = ["SCHEMA", "RocketMQDataSource"]
