"""The admin service (``rmq.admin.v1.Admin``) against a real broker process.

The store is pre-filled in-process (a ``Broker`` started and stopped on the directory the
broker process then opens), so these tests need nothing but the admin service itself.
Raw gRPC calls check the wire contract (JSON shape, codes, malformed requests); the
``RocketMQClient`` calls check that codes come back as our exception classes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import errors
from broker_core.broker.broker import Broker
from broker_core.client import RocketMQClient
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.message import PROPERTY_KEYS, PROPERTY_TAGS, Message
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker

Code = pb.Code
TOPIC = "orders"
QUEUES = 4
PER_QUEUE = 5


def _prefill(store_dir: Path) -> list[str]:
    """20 messages over 4 queues of ``orders`` (keys order-i), one binary; group offsets."""
    broker = Broker(
        BrokerConfig(**DEFAULT_CONFIG["broker"]),
        StoreConfig(store_dir=str(store_dir), **DEFAULT_CONFIG["store"]),
    )
    broker.start()
    try:
        messages = [
            Message(
                TOPIC,
                f"order {i}".encode(),
                queue_id=i % QUEUES,
                properties={PROPERTY_KEYS: f"order-{i}", PROPERTY_TAGS: "TagA"},
            )
            for i in range(QUEUES * PER_QUEUE - 1)
        ]
        messages.append(
            Message(TOPIC, b"\xff\xfe\x00binary", queue_id=3, properties={PROPERTY_KEYS: "blob"})
        )
        ids = [r.message_id for r in broker.sending.send(messages)]
        broker.store.wait_dispatched()
        for qid in range(QUEUES):
            broker.consumer_groups.commit_offset("GID_progress", TOPIC, qid, 2)
    finally:
        broker.stop()
    return ids


Prefilled = tuple[BrokerProcess, list[str]]


@pytest.fixture(scope="module")
def prefilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prefilled]:
    workdir = tmp_path_factory.mktemp("admin")
    ids = _prefill(workdir / "store")
    proc = start_broker(workdir)
    yield proc, ids
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.fixture(scope="module")
def broker(prefilled: Prefilled) -> BrokerProcess:
    return prefilled[0]


@pytest.fixture(scope="module")
def channel(broker: BrokerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.endpoint) as ch:
        yield ch


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(broker.endpoint, timeout_s=5) as c:
        yield c


def raw(channel: grpc.Channel, method: str, body: bytes) -> dict[str, Any]:
    reply = channel.unary_unary(f"/rmq.admin.v1.Admin/{method}")(body, timeout=5)
    return json.loads(reply)


def admin(channel: grpc.Channel, method: str, **payload: Any) -> dict[str, Any]:
    return raw(channel, method, json.dumps(payload).encode())


def expect(reply: dict[str, Any], code: int, *words: str) -> None:
    assert reply["status"]["code"] == code, reply
    assert reply["result"] is None
    for word in words:
        assert word in reply["status"]["message"], reply


# ---- health and the JSON contract -----------------------------------------------------------


def test_health_names_the_broker_and_its_commitlog(channel, broker) -> None:
    reply = admin(channel, "Health")
    assert reply["status"] == {"code": Code.OK, "message": "OK"}
    result = reply["result"]
    assert result["broker_name"] == "broker-a"
    assert result["endpoint"] == broker.endpoint
    assert result["commitlog_min_offset"] == 0
    assert result["commitlog_max_offset"] > 0


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", ["not valid UTF-8 JSON"]),
        (b"\xff\xfe", ["not valid UTF-8 JSON"]),
        (b"[1, 2]", ["must be a JSON object"]),
        (b'"name"', ["must be a JSON object"]),
        (b'{"name": "orders", "colour": "red"}', ["unknown field", "colour"]),
        (b'{"name": 7}', ["'name' must be a string"]),
        (b"{}", ["'name' is required"]),
    ],
)
def test_malformed_requests_are_bad_requests(channel, body, words) -> None:
    expect(raw(channel, "TopicStatus", body), Code.BAD_REQUEST, *words)


def test_server_survives_garbage_and_keeps_answering(channel) -> None:
    for _ in range(20):
        raw(channel, "CreateGroup", b"\x00" * 100)
    assert admin(channel, "Health")["status"]["code"] == Code.OK


def test_empty_request_means_no_fields(channel) -> None:
    assert raw(channel, "ListGroups", b"")["status"]["code"] == Code.OK


def test_unknown_method_is_unimplemented(channel, client) -> None:
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/rmq.admin.v1.Admin/Explode")(b"{}", timeout=5)
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(errors.UnsupportedError):
        client.broker.transport.admin("Explode", {})


# ---- topics ---------------------------------------------------------------------------------


def test_create_list_status_of_a_topic(client) -> None:
    created = client.create_topic("payments", queues=3, message_type="normal")
    assert created["created"] is True
    assert (created["read_queue_nums"], created["write_queue_nums"]) == (3, 3)
    assert created["message_type"] == "NORMAL"
    assert "payments" in [t["name"] for t in client.list_topics()]
    status = client.topic_status("payments")
    assert status == [{"queue_id": q, "min_offset": 0, "max_offset": 0} for q in range(3)]


def test_update_keeps_what_is_not_given(client) -> None:
    client.create_topic("evolving", read_queues=2, write_queues=3)
    updated = client.create_topic("evolving", perm=4, update=True)
    assert updated["created"] is False
    assert (updated["read_queue_nums"], updated["write_queue_nums"], updated["perm"]) == (2, 3, 4)


def test_topic_status_reports_per_queue_offsets(client) -> None:
    status = client.topic_status(TOPIC)
    assert [(r["queue_id"], r["min_offset"], r["max_offset"]) for r in status] == [
        (q, 0, PER_QUEUE) for q in range(QUEUES)
    ]


def test_system_topics_are_listed_only_when_asked(client) -> None:
    assert "RMQ_SYS_TRANS_HALF_TOPIC" not in [t["name"] for t in client.list_topics()]
    names = [t["name"] for t in client.list_topics(include_system=True)]
    assert "RMQ_SYS_TRANS_HALF_TOPIC" in names and "SCHEDULE_TOPIC_XXXX" in names


@pytest.mark.parametrize(
    ("payload", "code", "word"),
    [
        ({"name": "bad name!"}, Code.ILLEGAL_TOPIC, "bad name!"),
        ({"name": "t1", "queues": 0}, Code.BAD_REQUEST, ">= 1"),
        ({"name": "t1", "queues": 2000}, Code.BAD_REQUEST, "1..1024"),
        ({"name": "t1", "queues": "4"}, Code.BAD_REQUEST, "integer"),
        ({"name": "t1", "queues": True}, Code.BAD_REQUEST, "integer"),
        ({"name": "t1", "perm": 5}, Code.BAD_REQUEST, "perm"),
        ({"name": "t1", "message_type": "BULK"}, Code.BAD_REQUEST, "message_type"),
        ({"name": "t1", "attributes": {"a": 1}}, Code.BAD_REQUEST, "attributes"),
    ],
)
def test_create_topic_refuses_bad_values(channel, payload, code, word) -> None:
    expect(admin(channel, "CreateTopic", **payload), code, word)


def test_unknown_topic_is_topic_not_found(channel, client) -> None:
    expect(admin(channel, "TopicStatus", name="nowhere"), Code.TOPIC_NOT_FOUND, "nowhere")
    with pytest.raises(errors.TopicNotFoundError, match="nowhere"):
        client.topic_status("nowhere")
    with pytest.raises(errors.TopicNotFoundError):
        client.delete_topic("nowhere")


def test_delete_topic(client) -> None:
    client.create_topic("doomed", queues=1)
    client.delete_topic("doomed")
    assert "doomed" not in [t["name"] for t in client.list_topics()]
    with pytest.raises(errors.TopicNotFoundError):
        client.topic_status("doomed")


def test_system_topics_cannot_be_deleted(channel) -> None:
    expect(
        admin(channel, "DeleteTopic", name="RMQ_SYS_TRANS_HALF_TOPIC"),
        Code.ILLEGAL_TOPIC,
        "system topic",
    )


# ---- groups ---------------------------------------------------------------------------------


def test_create_group_with_a_backoff_list(client) -> None:
    group = client.create_group("GID_list", max_retries=3, retry_backoff="1s,5s", fifo=True)
    assert group["created"] is True
    assert group["retry_policy"] == {
        "max_retries": 3,
        "backoff": {"type": "custom", "delays_ms": [1000, 5000]},
    }
    assert group["fifo"] is True
    assert "GID_list" in [g["name"] for g in client.list_groups()]


def test_create_group_with_exponential_backoff_and_update(client) -> None:
    client.create_group("GID_exp", retry_backoff="exponential:1s,2,1m", broadcast=True)
    with pytest.raises(errors.ConflictError, match="max_retries"):
        client.create_group("GID_exp", max_retries=5)
    updated = client.create_group("GID_exp", max_retries=5, update=True)
    assert updated["created"] is False
    assert updated["retry_policy"]["max_retries"] == 5
    assert updated["retry_policy"]["backoff"] == {
        "type": "exponential",
        "initial_ms": 1000,
        "multiplier": 2.0,
        "max_ms": 60_000,
    }
    assert updated["broadcast"] is True
    levels = client.create_group("GID_exp", retry_backoff="delay_level", update=True)
    assert levels["retry_policy"]["backoff"] == {"type": "delay_level"}


@pytest.mark.parametrize(
    ("payload", "code", "word"),
    [
        ({"name": "GID x"}, Code.ILLEGAL_CONSUMER_GROUP, "GID x"),
        ({"name": "GID_b", "retry_backoff": "1x"}, Code.BAD_REQUEST, "bad duration"),
        ({"name": "GID_b", "retry_backoff": 5}, Code.BAD_REQUEST, "retry_backoff"),
        ({"name": "GID_b", "retry_backoff": {"type": "linear"}}, Code.BAD_REQUEST, "linear"),
        ({"name": "GID_b", "max_retries": -1}, Code.BAD_REQUEST, "max_retries"),
        ({"name": "GID_b", "fifo": "yes"}, Code.BAD_REQUEST, "true or false"),
        ({"name": "GID_b", "consume_from_where": "middle"}, Code.BAD_REQUEST, "consume_from_where"),
        ({"name": "GID_b", "rebalance_strategy": "by_config"}, Code.BAD_REQUEST, "not offered"),
        ({"name": "GID_b%BC%x"}, Code.ILLEGAL_CONSUMER_GROUP, "must not contain %BC%"),
    ],
)
def test_create_group_refuses_bad_values(channel, payload, code, word) -> None:
    expect(admin(channel, "CreateGroup", **payload), code, word)


def test_group_progress_shows_lag_per_queue(client) -> None:
    progress = client.group_progress("GID_progress", TOPIC)
    assert progress["queues"] == [
        {
            "topic": TOPIC,
            "queue_id": q,
            "broker_offset": PER_QUEUE,
            "consumer_offset": 2,
            "lag": PER_QUEUE - 2,
        }
        for q in range(QUEUES)
    ]
    assert progress["total_lag"] == QUEUES * (PER_QUEUE - 2)


def test_group_progress_of_unknown_group_or_topic(channel, client) -> None:
    expect(
        admin(channel, "GroupProgress", name="GID_ghost"),
        Code.CONSUMER_GROUP_NOT_FOUND,
        "GID_ghost",
    )
    with pytest.raises(errors.GroupNotFoundError):
        client.group_progress("GID_ghost")
    with pytest.raises(errors.TopicNotFoundError):
        client.group_progress("GID_progress", "nowhere")


# ---- messages and offsets -------------------------------------------------------------------


def test_query_message_by_id(client, prefilled) -> None:
    ids = prefilled[1]
    [found] = client.query_message(message_id=ids[5])
    assert (found["message_id"], found["topic"], found["queue_id"], found["queue_offset"]) == (
        ids[5],
        TOPIC,
        1,
        1,
    )
    assert base64.b64decode(found["body"]) == b"order 5"
    assert found["body_encoding"] == "base64"
    assert (found["tag"], found["keys"]) == ("TagA", ["order-5"])
    [text] = client.query_message(message_id=ids[5], topic=TOPIC, text_bodies=True)
    assert (text["body"], text["body_encoding"]) == ("order 5", "text")


def test_binary_bodies_stay_base64_even_when_text_is_asked(client) -> None:
    [found] = client.query_message(key="blob", topic=TOPIC, text_bodies=True)
    assert found["body_encoding"] == "base64"
    assert base64.b64decode(found["body"]) == b"\xff\xfe\x00binary"


def test_query_message_by_key(client) -> None:
    found = client.query_message(key="order-7", topic=TOPIC)
    assert [(m["queue_id"], m["queue_offset"]) for m in found] == [(3, 1)]
    assert client.query_message(key="no-such-key", topic=TOPIC) == []


@pytest.mark.parametrize(
    ("payload", "code", "word"),
    [
        ({"id": "0123456789ABCDEF0123456789ABCDEF01"}, Code.MESSAGE_NOT_FOUND, "0123456789"),
        ({"key": "order-1"}, Code.BAD_REQUEST, "needs 'topic'"),
        ({"key": "order-1", "topic": "nowhere"}, Code.TOPIC_NOT_FOUND, "nowhere"),
        ({"id": "x", "key": "y"}, Code.BAD_REQUEST, "exactly one"),
        ({}, Code.BAD_REQUEST, "exactly one"),
        ({"key": "order-1", "topic": TOPIC, "max_results": 0}, Code.BAD_REQUEST, "max_results"),
    ],
)
def test_query_message_errors(channel, payload, code, word) -> None:
    expect(admin(channel, "QueryMessage", **payload), code, word)


def test_query_message_by_unknown_id_raises_message_not_found(client) -> None:
    with pytest.raises(errors.MessageNotFoundError):
        client.query_message(message_id="0123456789ABCDEF0123456789ABCDEF01")


def test_reset_offset_of_an_unknown_group_is_refused(client) -> None:
    with pytest.raises(errors.GroupNotFoundError, match="GID_never_made"):
        client.reset_offset("GID_never_made", TOPIC, "earliest")
    assert "GID_never_made" not in [g["name"] for g in client.list_groups()]


def test_reset_offset_to_earliest_latest_and_a_time(client) -> None:
    client.create_group("GID_reset")
    assert client.reset_offset("GID_reset", TOPIC, "earliest") == dict.fromkeys(range(QUEUES), 0)
    assert client.reset_offset("GID_reset", TOPIC, "latest") == dict.fromkeys(
        range(QUEUES), PER_QUEUE
    )
    assert client.reset_offset("GID_reset", TOPIC, 0) == dict.fromkeys(range(QUEUES), 0)
    progress = client.group_progress("GID_reset", TOPIC)
    assert progress["total_lag"] == QUEUES * PER_QUEUE
    future = client.reset_offset("GID_reset", TOPIC, "2999-01-01T00:00:00+00:00")
    assert future == dict.fromkeys(range(QUEUES), PER_QUEUE)


@pytest.mark.parametrize(
    ("payload", "code", "word"),
    [
        ({"group": "GID_r", "topic": TOPIC, "to": "yesterday"}, Code.BAD_REQUEST, "'to'"),
        ({"group": "GID_r", "topic": TOPIC, "to": -5}, Code.BAD_REQUEST, "'to'"),
        ({"group": "GID_r", "topic": TOPIC}, Code.BAD_REQUEST, "'to'"),
        ({"group": "GID_r", "topic": "nowhere", "to": "earliest"}, Code.TOPIC_NOT_FOUND, "nowhere"),
        ({"topic": TOPIC, "to": "earliest"}, Code.BAD_REQUEST, "'group' is required"),
    ],
)
def test_reset_offset_errors(channel, payload, code, word) -> None:
    expect(admin(channel, "ResetOffset", **payload), code, word)
