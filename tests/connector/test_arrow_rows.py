"""The source's fast rows equal the message-by-message reference (no network, no Spark).

Units sealed by the codec go two ways: bulk-decoded into columns and turned into a record
batch by ``units_to_record_batch`` (what the source does), and one by one through the
store's decoder, the server's protobuf conversion and the client's ``from_protobuf`` into
``ReceivedMessage`` objects, then ``arrow_reference.to_record_batch``. Both batches must
be equal, column for column.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from broker_core.client.columnar import decode_units
from broker_core.client.convert import from_protobuf
from broker_core.client.model import ReceivedMessage
from broker_core.message import Message
from broker_core.server.convert_out import to_pb_message
from broker_core.store import codec
from connector.arrow import SCHEMA, arrow_schema_of, units_to_record_batch
from tests.connector.arrow_reference import to_record_batch
from tests.store.conftest import seal


def sealed(messages: list[Message]) -> tuple[bytes, np.ndarray]:
    parts, phys = [], 1_000
    for i, msg in enumerate(messages):
        parts.append(seal(msg, 40 + i, phys, 5_000 + i, (b"\x0a\x00\x00\x02", 8081)))
        phys += len(parts[-1])
    return b"".join(parts), np.array([len(p) for p in parts], np.int32)


def varied(count: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        props = {"n": str(i), "ünï": "cödé ✓"} if rng.random() < 0.7 else {}
        props["UNIQ_KEY"] = f"ID{i:06d}"
        if rng.random() < 0.5:
            props["TAGS"] = rng.choice(["a", "paid", "t" * 40])
        if rng.random() < 0.4:
            props["KEYS"] = " ".join(f"k{i}-{j}" for j in range(rng.randint(1, 3)))
        if rng.random() < 0.2:
            props["__SHARDINGKEY"] = f"group-{i % 3}"
        body = rng.randbytes(rng.choice([1, 12, 128, 3000]))
        out.append(
            Message(
                "orders",
                body,
                queue_id=3,
                properties=props,
                born_timestamp_ms=1_700_000_000_000 + i,
            )
        )
    return out


def one_by_one(data: bytes, sizes: np.ndarray) -> list[ReceivedMessage]:
    out, pos = [], 0
    for size in sizes:
        out.append(from_protobuf(to_pb_message(codec.decode(data, pos))))
        pos += int(size)
    return out


@pytest.mark.parametrize("include_properties", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_rows_equal_the_reference(seed: int, include_properties: bool) -> None:
    data, sizes = sealed(varied(50, seed))
    schema = arrow_schema_of(SCHEMA)
    fast = units_to_record_batch(
        decode_units(data, sizes), "broker-a", schema, include_properties=include_properties
    )
    reference = to_record_batch(
        one_by_one(data, sizes), "broker-a", schema, include_properties=include_properties
    )
    assert fast.schema == reference.schema
    for name in schema.names:
        got = fast.column(name).to_pylist()
        want = reference.column(name).to_pylist()
        if name == "properties" and include_properties:  # map entries: order is not data
            got = [sorted(m) for m in got]
            want = [sorted(m) for m in want]
        assert got == want, name
    assert fast.num_rows == 50


def test_the_reference_builds_the_documented_row() -> None:
    msg = ReceivedMessage(
        "ID1", "orders", 0, 7, b"{}", tag="paid", born_timestamp_ms=1000, store_timestamp_ms=2000
    )
    batch = to_record_batch([msg], "broker-a", arrow_schema_of(SCHEMA))
    assert batch.num_rows == 1
    assert batch.column("queueOffset").to_pylist() == [7]
    assert batch.column("tag").to_pylist() == ["paid"]
    assert batch.column("properties").to_pylist() == [[]]
