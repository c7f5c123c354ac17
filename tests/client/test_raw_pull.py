"""Bulk pulls (``rmq.bulk.v1.Bulk/PullRaw``) against a real broker process.

A raw pull must deliver exactly what ``PullMessage`` delivers (same offsets, bodies,
ids, filters, long polling and offset errors), only as stored units.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import grpc
import pytest

from broker_core import errors
from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.client.columnar import check_placement, decode_units, split_properties
from broker_core.client.raw import RAW_PULL_METHOD, decode_raw_pull
from tests.server.conftest import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(
        tmp_path_factory.mktemp("raw"), config={"broker": {"max_raw_pull_batch": 300}}
    )
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint, timeout_s=10) as c:
        c.create_topic("bulk", queues=1)
        c.send_batch(
            "bulk",
            [
                OutgoingMessage(
                    f"m{i}".encode(), "even" if i % 2 == 0 else "odd", [f"key-{i}"], {"n": str(i)}
                )
                for i in range(500)
            ],
        )
        yield c


def _columns(batch, first: int):
    cols = decode_units(batch.data, batch.sizes)
    check_placement(cols, "bulk", 0, first)
    return cols


def test_a_raw_pull_delivers_what_pull_message_delivers(client) -> None:
    raw = client.pull_raw("GID_raw", "bulk", 0, 3, 40)
    plain = client.pull("GID_raw", "bulk", 0, 3, 40)
    cols = _columns(raw, 3)
    props = split_properties(cols)
    assert (raw.count, raw.next_offset, raw.min_offset, raw.max_offset) == (40, 43, 0, 500)
    assert cols.queue_offset.tolist() == [m.queue_offset for m in plain.messages]
    assert cols.body.to_pylist() == [m.body for m in plain.messages]
    assert props.message_id.to_pylist() == [m.message_id for m in plain.messages]
    assert props.tag.to_pylist() == [m.tag for m in plain.messages]
    assert props.keys.to_pylist() == [list(m.keys) for m in plain.messages]


def test_the_broker_caps_the_count_and_the_byte_budget(client) -> None:
    assert client.pull_raw("GID_raw", "bulk", 0, 0, 10_000).count == 300  # max_raw_pull_batch
    small = client.pull_raw("GID_raw", "bulk", 0, 0, 10_000, max_bytes=1_000)
    assert 0 < small.count < 10 and len(small.data) <= 1_000
    assert client.pull_raw("GID_raw", "bulk", 0, 0, 10, max_bytes=1).count == 1  # at least one


def test_end_of_queue_is_empty_and_beyond_is_an_illegal_offset(client) -> None:
    end = client.pull_raw("GID_raw", "bulk", 0, 500, 10)
    assert (end.count, end.next_offset) == (0, 500)
    with pytest.raises(errors.InvalidOffsetError) as info:
        client.pull_raw("GID_raw", "bulk", 0, 900, 10)
    assert info.value.next_offset == 500


def test_tag_and_sql_filters_run_on_the_broker(client) -> None:
    odd = client.pull_raw("GID_raw", "bulk", 0, 0, 5, filter_expression="odd")
    assert _columns(odd, 0).queue_offset.tolist() == [1, 3, 5, 7, 9]
    sql = client.pull_raw(
        "GID_raw", "bulk", 0, 0, 3, filter_expression="n > 496", filter_type="SQL"
    )
    assert _columns(sql, 0).body.to_pylist() == [b"m497", b"m498", b"m499"]
    with pytest.raises(errors.FilterSyntaxError):
        client.pull_raw("GID_raw", "bulk", 0, 0, 3, filter_expression="n >", filter_type="SQL")


def test_long_polling_answers_when_a_message_arrives(client) -> None:
    client.create_topic("bulk-polled", queues=1)
    got: list[object] = []
    puller = threading.Thread(
        target=lambda: got.append(
            client.pull_raw("GID_raw", "bulk-polled", 0, 0, 10, long_polling_timeout_ms=20_000)
        )
    )
    puller.start()
    client.send_batch("bulk-polled", [b"wake up"])
    puller.join(30)
    batch = got[0]
    assert decode_units(batch.data, batch.sizes).body.to_pylist() == [b"wake up"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("payload", "error", "text"),
    [
        (b"not json", errors.InvalidArgumentError, "not valid UTF-8 JSON"),
        (
            json.dumps(
                {
                    "group": "g",
                    "topic": "bulk",
                    "queue_id": 0,
                    "offset": 0,
                    "max_count": 1,
                    "colour": "red",
                }
            ).encode(),
            errors.InvalidArgumentError,
            "unknown field",
        ),
        (
            json.dumps({"topic": "bulk", "queue_id": 0, "offset": 0, "max_count": 1}).encode(),
            errors.InvalidArgumentError,
            "'group' is required",
        ),
        (
            json.dumps(
                {"group": "g", "topic": "nope", "queue_id": 0, "offset": 0, "max_count": 1}
            ).encode(),
            errors.TopicNotFoundError,
            "nope",
        ),
        (
            json.dumps(
                {"group": "g", "topic": "bulk", "queue_id": 7, "offset": 0, "max_count": 1}
            ).encode(),
            errors.InvalidArgumentError,
            "queue 7",
        ),
    ],
)
def test_bad_requests_get_clear_errors(broker, payload, error, text) -> None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        response = channel.unary_unary(RAW_PULL_METHOD)(payload, timeout=10)
    with pytest.raises(error, match=text):
        decode_raw_pull(response, 0)
