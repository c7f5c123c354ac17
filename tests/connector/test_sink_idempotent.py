"""The at-least-once sink with ``idempotent`` (on by default for streaming writes): a task
that fails mid-batch after sending part of its rows, replayed from the checkpoint, re-sends
them under the same message ids and the broker's dedup window drops the repeats — every row
exactly once, counted, without transactions. Plus the ids themselves: derived, stable and
distinct per write."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from broker_core.client import RocketMQClient
from broker_core.client.message_ids import ID_BLOCKS
from connector.sink import _idempotent, make_stream_writer, make_writer
from connector.sink_options import parse_sink_options
from tests.connector.conftest import await_query
from tests.connector.test_exactly_once import bodies, broker, client, read_topic  # noqa: F401
from tests.server.conftest import BrokerProcess


def test_the_option_defaults_on_for_streams_and_off_for_batches() -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("body", StringType())])
    options = {"endpoints": "127.0.0.1:1", "topic": "t"}
    assert make_writer(options, schema, False).options.idempotent is False  # type: ignore[attr-defined]
    stream = make_stream_writer(options, schema, False)
    assert stream.options.idempotent is True  # type: ignore[attr-defined]
    off = make_stream_writer({**options, "idempotent": "false"}, schema, False)
    assert off.options.idempotent is False  # type: ignore[attr-defined]
    on = _idempotent(parse_sink_options(options), default=True)
    assert on.write_id and on.write_id != _idempotent(on, default=True).write_id


def test_fixed_ids_repeat_exactly_and_only_inside_their_block() -> None:
    prefix = b"02" + b"A" * 24
    with ID_BLOCKS.fixed(prefix, 7):
        assert ID_BLOCKS.reserve(3) == (prefix, 7) and ID_BLOCKS.reserve(1) == (prefix, 10)
    assert ID_BLOCKS.reserve(1)[0] != prefix


def test_a_task_failing_mid_batch_delivers_every_row_once(
    spark: SparkSession,
    broker: BrokerProcess,  # noqa: F811
    client: RocketMQClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic = "idem-task-failure"
    client.create_topic(topic, queues=2)
    rows = {"a": [f"a-{i:03d}" for i in range(120)]}
    rows["b"] = [f"b-{i:03d}" for i in range(300)] + ["MARKER"] + [f"c-{i:03d}" for i in range(50)]
    (tmp_path / "in").mkdir()
    for name, values in rows.items():
        lines = "".join(json.dumps({"body": v}) + "\n" for v in values)
        (tmp_path / "in" / f"{name}.json").write_text(lines)
    flag, endpoint = str(tmp_path / "failed-once"), broker.endpoint

    @F.udf("string")
    def fail_once(body):  # no type hints: Spark would read them as a pandas UDF's
        if body == "MARKER" and not os.path.exists(flag):
            open(flag, "w").close()
            # Fail once file a's task has sent its 120 rows: the replay re-sends them all.
            with RocketMQClient(endpoint) as probe:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and (
                    sum(probe.query_offset(topic, q, "END") for q in (0, 1)) < 120
                ):
                    time.sleep(0.05)
            raise RuntimeError("injected task failure")
        return body

    def run() -> None:
        stream = spark.readStream.schema("body string").json(str(tmp_path / "in"))
        query = (
            stream.select(fail_once("body").alias("body"))
            .writeStream.format("rocketmq")
            .option("endpoints", broker.endpoint)
            .option("topic", topic)
            .option("batchSize", "10")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        await_query(query, 180)

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        with pytest.raises(StreamingQueryException, match="injected task failure"):
            run()
        sent_by_failed_run = len(read_topic(client, topic))
        run()  # restart from the checkpoint: the batch is replayed, same ids
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    assert os.path.exists(flag) and sent_by_failed_run >= 120  # rows the replay re-sends
    everything = [v for values in rows.values() for v in values if v != "MARKER"] + ["MARKER"]
    assert bodies(client, topic) == Counter(everything)
