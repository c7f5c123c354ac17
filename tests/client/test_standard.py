"""The client against a broker without our services (``--no-extensions``): it falls back to
the standard ``apache.rocketmq.v2`` RPCs, and says clearly what has no standard RPC.

One store is written through a broker with its services, then served by a broker started
with ``--no-extensions`` on the same store, so both paths read the very same messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from broker_core.client import OutgoingMessage, RocketMQClient, standard
from broker_core.client.columnar import ColumnBatch, split_properties
from broker_core.errors import (
    InvalidOffsetError,
    ServiceNotOfferedError,
    TopicNotFoundError,
    UnsupportedError,
)
from broker_core.protocol.properties import SYSTEM_KEYS
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.ha.controller_procs import free_port
from tests.server.conftest import DEFAULT_CONFIG

TOPIC = "std-orders"
MESSAGES = [
    OutgoingMessage(b"plain-0"),
    OutgoingMessage(b"tagged-1", tag="TagA", keys=("k1", "k2"), properties={"region": "eu"}),
    OutgoingMessage(b"grouped-2", tag="TagB", message_group="g1"),
    OutgoingMessage(b"props-3", properties={"a": "1", "b": "two words"}),
] * 5


@dataclass
class Brokers:
    """The same store served with our services (``full``) and without (``plain``)."""

    full: BrokerProcess
    plain: BrokerProcess
    full_columns: list[ColumnBatch]


def _start(workdir: Path, *args: str) -> BrokerProcess:
    return launch_broker(workdir, config=DEFAULT_CONFIG, extra_args=args)


def _pull_all(client: RocketMQClient, queues: int) -> list[ColumnBatch]:
    return [client.pull_columns("GID_std", TOPIC, q, 0, 1_000) for q in range(queues)]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    workdir = tmp_path_factory.mktemp("standard")
    full = _start(workdir)
    try:
        with RocketMQClient(full.endpoint) as client:
            client.create_topic(TOPIC, queues=2)
            client.send_batch(TOPIC, MESSAGES)
            columns = _pull_all(client, 2)
            assert not standard.is_standard(full.endpoint)
    finally:
        assert full.stop() == 0, "".join(full.output[-30:])
    plain = _start(workdir, "--no-extensions")
    yield Brokers(full, plain, columns)
    assert plain.stop() == 0, "".join(plain.output[-30:])


@pytest.fixture
def plain_client(brokers: Brokers) -> Iterator[RocketMQClient]:
    standard.forget(brokers.plain.endpoint)  # every test sees the first use again
    with RocketMQClient(brokers.plain.endpoint) as client:
        yield client


def test_admin_call_says_there_is_no_standard_rpc(plain_client: RocketMQClient) -> None:
    with pytest.raises(ServiceNotOfferedError) as caught:
        plain_client.list_topics()
    text = str(caught.value)
    assert "ListTopics" in text and "rmq.admin.v1.Admin" in text and "--no-extensions" in text
    assert "instead of a pattern" in text
    assert standard.is_standard(plain_client.endpoint)
    with pytest.raises(UnsupportedError, match=r"QueryMessage .*exactly-once streaming sink"):
        plain_client.query_message(key="batch-1", topic=TOPIC)


def test_first_use_is_remembered_per_endpoint(plain_client: RocketMQClient) -> None:
    assert not standard.is_standard(plain_client.endpoint)
    plain_client.topic_status(TOPIC)
    assert standard.is_standard(plain_client.endpoint)
    other = RocketMQClient(plain_client.endpoint)  # a new client, same process
    with other, pytest.raises(ServiceNotOfferedError, match="Health"):
        other.health()


def test_topic_status_from_route_and_offsets(
    brokers: Brokers, plain_client: RocketMQClient
) -> None:
    rows = plain_client.topic_status(TOPIC)
    assert rows == [
        {"queue_id": q, "min_offset": 0, "max_offset": batch.count}
        for q, batch in enumerate(brokers.full_columns)
    ]
    assert sum(row["max_offset"] for row in rows) == len(MESSAGES)
    with pytest.raises(TopicNotFoundError):
        plain_client.topic_status("std-no-such-topic")


def test_broker_name_from_a_topic_route(plain_client: RocketMQClient) -> None:
    assert plain_client.broker_name(["std-no-such-topic", TOPIC]) == "broker-a"
    with pytest.raises(UnsupportedError, match="name an existing topic"):
        plain_client.broker_name(["std-no-such-topic"])


def test_pull_columns_match_the_bulk_path(brokers: Brokers, plain_client: RocketMQClient) -> None:
    got = _pull_all(plain_client, 2)
    assert standard.is_standard(plain_client.endpoint)
    assert [b.next_offset for b in got] == [b.next_offset for b in brokers.full_columns]
    assert sum(b.count for b in got) == len(MESSAGES)
    for fast, slow in zip(brokers.full_columns, got, strict=True):
        a, b = fast.columns, slow.columns
        assert a.count == b.count > 0
        assert a.topic.equals(b.topic) and a.body.equals(b.body)
        for name in ("queue_id", "queue_offset", "born_timestamp_ms", "store_timestamp_ms"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        pa_, pb_ = split_properties(a, SYSTEM_KEYS), split_properties(b, SYSTEM_KEYS)
        for name in ("tag", "message_id", "keys", "message_group"):
            assert getattr(pa_, name).equals(getattr(pb_, name)), name
        # a protobuf map has no order: the same entries, maybe in another order
        assert [dict(m) for m in pa_.user.to_pylist()] == [dict(m) for m in pb_.user.to_pylist()]


def test_pull_columns_filter_and_bad_offset(plain_client: RocketMQClient) -> None:
    end = plain_client.query_offset(TOPIC, 0, "END")
    batch = plain_client.pull_columns("GID_std", TOPIC, 0, 0, 100, filter_expression="TagA")
    props = split_properties(batch.columns)
    assert set(props.tag.to_pylist()) == {"TagA"} and batch.next_offset == end
    with pytest.raises(InvalidOffsetError):
        plain_client.pull_columns("GID_std", TOPIC, 0, 999, 10)


def test_sends_fall_back_to_send_message(plain_client: RocketMQClient) -> None:
    receipts = plain_client.send_batch("std-sent", [b"one", b"two", b"three"])
    assert standard.is_standard(plain_client.endpoint)
    assert len({r.message_id for r in receipts}) == 3
    status = plain_client.topic_status("std-sent")  # auto-created by the send
    assert sum(row["max_offset"] for row in status) == 3
    columns = plain_client.send_columns("std-sent", [b"four"], tags=["T"])
    assert len(columns) == 1


def test_offsets_use_v2_rpcs(plain_client: RocketMQClient) -> None:
    plain_client.update_offset("GID_std_offsets", TOPIC, 1, 7)
    assert plain_client.get_offset("GID_std_offsets", TOPIC, 1) == 7
    assert plain_client.query_offset(TOPIC, 1, "END") > 0


def test_missing_admin_method_does_not_mark_the_endpoint(brokers: Brokers) -> None:
    """An admin method this broker lacks is UNIMPLEMENTED too, but the service is there."""
    restarted = _start(brokers.full.store_dir.parent / "other")
    try:
        with RocketMQClient(restarted.endpoint) as client:
            with pytest.raises(ServiceNotOfferedError):
                client.broker.transport.admin("NoSuchVerb", {})
            assert not standard.is_standard(restarted.endpoint)
            assert client.health()["broker_name"] == "broker-a"
    finally:
        assert restarted.stop() == 0


def test_an_address_that_changed_hands_gets_the_fast_path_again(
    brokers: Brokers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mark left by a standard-only server at an address does not outlive it: launching
    a broker there clears it, an answered admin call clears it, and it lapses by itself."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    standard.mark_standard(endpoint)  # as if a --no-extensions broker had served this port
    full = launch_broker(
        brokers.full.store_dir.parent / "handed-over", config=DEFAULT_CONFIG, listen=endpoint
    )
    try:
        assert full.endpoint == endpoint and not standard.is_standard(endpoint)
        standard.mark_standard(endpoint)  # left by another process-wide client, say
        with RocketMQClient(endpoint) as client:
            client.create_topic("std-handed-over", queues=1)  # asked all the same
            assert not standard.is_standard(endpoint)
            assert client.health()["broker_name"] == "broker-a"
    finally:
        assert full.stop() == 0, "".join(full.output[-30:])
    monkeypatch.setattr(standard, "REPROBE_S", 0.0)
    standard.mark_standard(endpoint)
    assert not standard.is_standard(endpoint)  # lapsed at once: the next call asks again


def test_an_admin_call_to_a_marked_standard_endpoint_is_still_refused_clearly(
    plain_client: RocketMQClient,
) -> None:
    standard.mark_standard(plain_client.endpoint)
    with pytest.raises(ServiceNotOfferedError, match=r"CreateTopic .*own tools"):
        plain_client.create_topic("std-refused")
    assert standard.is_standard(plain_client.endpoint)
