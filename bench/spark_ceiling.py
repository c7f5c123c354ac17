"""The fastest any Python data source can be: a source and a sink that do no work.

``spark-read`` and ``spark-write`` compare the connector with Spark's Parquet source and
sink, which run in the JVM. A Python data source pays for moving every batch between
the JVM and a Python worker (Arrow over a socket, then rows), whatever it does itself.
These two measure that toll on the same session: ``ceiling`` yields prebuilt Arrow
batches with the connector's exact schema and row count, ``ceiling`` as a sink drops
what it is given. No Python source or sink can beat them, so their ratio to Parquet is
the highest ratio the connector could reach.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connector.arrow import SCHEMA, arrow_schema_of

NAME = "rocketmq_bench_ceiling"
_BATCH_ROWS = 65_536


def _column(field: pa.Field, rows: int, body: bytes) -> pa.Array:
    """A column of ``rows`` values: the body in ``body``, empty values elsewhere."""
    kind = field.type
    if field.name == "body":
        return pa.array([body] * rows, kind)
    if pa.types.is_string(kind):
        return pa.array([""] * rows, kind)
    if pa.types.is_integer(kind) or pa.types.is_timestamp(kind):
        return pa.array(np.zeros(rows, np.int64)).cast(kind)
    empty = np.zeros(rows + 1, np.int32)
    if pa.types.is_map(kind):
        strings = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(empty), strings, strings).cast(kind)
    return pa.ListArray.from_arrays(pa.array(empty), pa.array([], pa.string())).cast(kind)


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.rows = int(options["rows"])
        self.partitions_count = int(options["partitions"])
        self.body = bytes.fromhex(options["body"])

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.partitions_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema_of(SCHEMA)
        share = self.rows // self.partitions_count
        if partition.value < self.rows % self.partitions_count:
            share += 1
        full = pa.RecordBatch.from_arrays(
            [_column(f, min(share, _BATCH_ROWS), self.body) for f in schema], schema=schema
        )
        while share > 0:
            yield full if share >= full.num_rows else full.slice(0, share)
            share -= full.num_rows


class _Writer(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()


class CeilingSource(DataSource):
    """``format(NAME)``: options ``rows``, ``partitions`` and ``body`` (hex) for reads."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> _Writer:
        return _Writer()


def register(spark: Any) -> None:
    """Make ``format(NAME)`` available; workers get the classes by value (bench is not
    an installed package)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(CeilingSource)
