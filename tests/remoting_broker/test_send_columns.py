"""The 4.x batch's fast lane builds the broker's batch, or leaves the batch to the general path.

What the store's encoder would refuse (an oversize body, a topic no unit can hold) never
reaches the broker from this lane: it returns None, and the general path names the problem.
"""

from __future__ import annotations

import pytest

from broker_core.broker.batch import PlainBatch
from broker_core.remoting_broker.send_columns import plain_columns


def _columns(topic: str, body: bytes, **props: str) -> PlainBatch | None:
    return plain_columns(
        topic,
        [(0, body, {"UNIQ_KEY": "U1", **props})],
        sys_flag=0,
        born_ms=5,
        born_host=("10.0.0.1", 7),
        max_body_bytes=8,
        max_properties_bytes=1024,
        queue_id=3,
    )


def test_a_plain_batch_becomes_the_brokers_batch_in_its_queue() -> None:
    batch = _columns("t", b"12345678", TAGS="a", KEYS="k1 k2")
    assert batch is not None
    assert (batch.topic, batch.queue_id, batch.born_ms, batch.born_host) == (
        "t",
        3,
        [5],
        ("10.0.0.1", 7),
    )
    assert batch.index_keys == [["U1", "k1", "k2"]] and len(batch) == 1


@pytest.mark.parametrize(
    ("topic", "body"),
    [("t", b"123456789"), ("t", b""), ("", b"x"), ("t" * 128, b"x"), ("é" * 64, b"x")],
)
def test_what_no_unit_can_hold_takes_the_general_path(topic: str, body: bytes) -> None:
    assert _columns(topic, body) is None
