"""Every message a broker acknowledges has a destination.

A client's send to one of the broker's own topics (``SCHEDULE_TOPIC_XXXX``, the timer, the
transaction half/op and POP revive topics, any ``rmq_sys_``/``RMQ_SYS_`` name) is refused
with a clear error on every front end, and nothing is stored: before the rule, such a
message was acknowledged and then dropped by the service that reads the topic ("message has
no real destination"). The same holds for held messages whose routing properties are bad
(delay level, delivery time, a transaction without its group), and a request with one bad
message stores none of the others. A send-back to ``%RETRY%group`` is still taken.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.broker.broker import Broker
from broker_core.broker.system_topics import (
    REVIVE_TOPIC,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from broker_core.config import BrokerConfig
from broker_core.errors import InvalidArgumentError, InvalidTopicError, RocketMQError
from broker_core.message import Message
from broker_core.protocol.bulk_send import decode_response, encode_request
from broker_core.protocol.property_codec import encode_text
from broker_core.protocol.status import status_of
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from broker_core.server.context import ServerContext
from broker_core.server.handlers.send import send_bulk, send_message
from tests.remoting_broker.conftest import call, connect
from tests.remoting_records import encode_batch
from tests.server.test_send_lanes import Peer, message
from tests.store.conftest import small_config

OWN_TOPICS = (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    REVIVE_TOPIC,
    "RMQ_SYS_OTHER",
    "rmq_sys_anything",
    "TRANS_CHECK_MAX_TIME_TOPIC",
)  # not RMQ_SYS_TRACE_TOPIC: the clients' traces go there (tests/test_cli_trace.py)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[RemotingFrontEnd]:
    broker = Broker(BrokerConfig(default_queue_nums=2), small_config(tmp_path / "store"))
    broker.start()
    end = RemotingFrontEnd(broker, "127.0.0.1:0")
    end.start()
    yield end
    end.stop()
    broker.stop()


@pytest.fixture
def broker(front: RemotingFrontEnd) -> Broker:
    return front.ctx.broker


def log_end(broker: Broker) -> int:
    return broker.store.commitlog.max_offset


def grpc_send(broker: Broker, topic: str, count: int, **system: Any) -> Any:
    """SendMessage of ``count`` messages (32 or more take the column converter), answered
    as the service's one error wrapper answers a handler's error."""
    ctx = ServerContext(broker, "127.0.0.1:1", "dest")
    protos = [message(topic, b"x%d" % i, f"ID{i:08d}", **system) for i in range(count)]
    request = service_pb2.SendMessageRequest(messages=protos)
    try:
        return send_message(ctx, request, Peer())  # type: ignore[arg-type]
    except RocketMQError as exc:
        return service_pb2.SendMessageResponse(status=status_of(exc))


@pytest.mark.parametrize("topic", OWN_TOPICS)
@pytest.mark.parametrize("count", [1, 40])
def test_grpc_send_message_to_a_system_topic_is_refused(
    broker: Broker, topic: str, count: int
) -> None:
    end = log_end(broker)
    response = grpc_send(broker, topic, count)
    assert response.status.code == pb.Code.ILLEGAL_TOPIC, response.status
    assert "system topic" in response.status.message
    assert not response.entries
    assert log_end(broker) == end


@pytest.mark.parametrize("topic", OWN_TOPICS)
def test_bulk_send_to_a_system_topic_is_refused(broker: Broker, topic: str) -> None:
    end = log_end(broker)
    ctx = ServerContext(broker, "127.0.0.1:1", "dest")
    props = [b"UNIQ_KEY\x01u%d\x02" % i for i in range(2)]
    frame = encode_request(topic, [b"a", b"b"], props, born_timestamp_ms=1, born_host="h")
    status, offsets = decode_response(send_bulk(ctx, frame, Peer()))  # type: ignore[arg-type]
    assert status["code"] == pb.Code.ILLEGAL_TOPIC, status
    assert "system topic" in status["message"]
    assert not len(offsets)
    assert log_end(broker) == end


def v2_fields(topic: str, **props: str) -> dict[str, str]:
    return {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": encode_text(props),
        "j": "0",
        "k": "false",
    }


def v1_fields(topic: str) -> dict[str, str]:
    return {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": encode_text({"UNIQ_KEY": "u1"}),
    }


@pytest.mark.parametrize("topic", OWN_TOPICS)
@pytest.mark.parametrize("way", ["v1", "v2", "batch_fast", "batch_general"])
def test_remoting_send_to_a_system_topic_is_refused(
    front: RemotingFrontEnd, clients: list[Any], topic: str, way: str
) -> None:
    client = connect(front, clients)
    end = log_end(front.ctx.broker)
    if way == "v1":
        resp = call(client, RC.SEND_MESSAGE, v1_fields(topic), b"x")
    elif way == "v2":
        resp = call(client, RC.SEND_MESSAGE_V2, v2_fields(topic, UNIQ_KEY="u1"), b"x")
    else:  # a delay level sends the batch down the general path
        extra = {"DELAY": "2"} if way == "batch_general" else {}
        items = [(0, b"b%d" % i, {"UNIQ_KEY": f"u{i}", **extra}) for i in range(3)]
        fields = {**v2_fields(topic), "m": "true"}
        resp = call(client, RC.SEND_BATCH_MESSAGE, fields, encode_batch(items))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL, (resp.code, resp.remark)
    assert "system topic" in resp.remark
    assert log_end(front.ctx.broker) == end


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for c in made:
        c.close()


BAD_HELD = [
    ({"DELAY": "0"}, "delay level"),
    ({"DELAY": "19"}, "delay level"),
    ({"DELAY": "-1"}, "delay level"),
    ({"DELAY": "two"}, "delay level"),
    ({"__STARTDELIVERTIME": "soon"}, "delivery timestamp"),
    ({"__STARTDELIVERTIME": "9" * 30}, "delivery timestamp"),
]


@pytest.mark.parametrize(("props", "words"), BAD_HELD)
def test_a_held_message_that_cannot_be_routed_is_refused(
    broker: Broker, props: dict[str, str], words: str
) -> None:
    end = log_end(broker)
    with pytest.raises(InvalidArgumentError, match=words):
        broker.sending.send([Message("orders", b"x", properties=dict(props))])
    assert log_end(broker) == end


def test_one_bad_message_stores_none_of_its_request(broker: Broker) -> None:
    """Held messages are routed only after every message of the send was checked."""
    good_delay = Message("orders", b"a", properties={"DELAY": "3"})
    good_timer = Message("orders", b"b", properties={"__STARTDELIVERTIME": str(2**40)})
    end = log_end(broker)
    with pytest.raises(InvalidArgumentError, match="delay level"):
        broker.sending.send(
            [good_delay, good_timer, Message("orders", b"c", properties={"DELAY": "99"})]
        )
    with pytest.raises(InvalidTopicError, match="system topic"):
        broker.sending.send([good_delay, Message(SCHEDULE_TOPIC, b"d", properties={"DELAY": "1"})])
    with pytest.raises(InvalidArgumentError, match="producer group"):
        broker.sending.send([good_timer, Message("orders", b"e", properties={"TRAN_MSG": "true"})])
    assert log_end(broker) == end


def test_send_back_to_the_retry_topic_is_still_taken(broker: Broker) -> None:
    """The refusal is for the broker's own topics only: a retry topic is delivered to its
    group, so a 4.x consumer's send-back (or its direct fallback send) is stored."""
    broker.topics.ensure_retry_topic("g")
    [result] = broker.sending.send([Message("%RETRY%g", b"again")])
    assert result.topic == "%RETRY%g"
    broker.store.wait_dispatched()
    assert broker.store.max_offset("%RETRY%g", result.queue_id) == result.queue_offset + 1
