"""The ``rocketmq`` Spark data source: RocketMQ topics as a batch and streaming source and sink.

Found by name with no registration: ``pyspark_rocketmq.DefaultSource`` is this class, and
Spark imports every top-level ``pyspark_*`` module it can see (``pip install`` of this
project is enough). Reading::

    df = (spark.read.format("rocketmq")
          .option("endpoints", "127.0.0.1:8081").option("topic", "orders").load())
    stream = (spark.readStream.format("rocketmq")
              .option("endpoints", "127.0.0.1:8081").option("topics", "orders,refunds")
              .option("maxMessagesPerTrigger", "10000").load())

Read options are documented in :mod:`connector.options`, the row schema in
:mod:`connector.arrow`, offsets in :mod:`connector.offsets`. Writing goes to
``connector.sink`` (imported only when a write happens, so a read never needs it).

The data source object is created and pickled by Spark on the driver; it holds only the
options. Option errors are raised when Spark asks for a reader or writer.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from connector.arrow import SCHEMA, check_schema
from connector.options import parse_read_options


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        """The fixed read schema (``connector.arrow.SCHEMA``)."""
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from connector.source import RocketMQBatchReader

        check_schema(schema)
        return RocketMQBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from connector.stream_source import RocketMQStreamReader

        check_schema(schema)
        return RocketMQStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from connector.sink import make_writer

        return make_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from connector.sink import make_stream_writer

        return make_stream_writer(self.options, schema, overwrite)
