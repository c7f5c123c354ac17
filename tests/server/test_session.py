"""Session RPCs against a real broker process: QueryRoute, Heartbeat, Telemetry,
QueryAssignment and NotifyClientTermination, over the official client and raw stubs."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker

Code = pb.Code
TIMEOUT_S = 10


def admin(endpoint: str, method: str, **fields: Any) -> Any:
    """Call the broker's JSON admin service; return ``result`` (asserting OK)."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            f"/rmq.admin.v1.Admin/{method}",
            request_serializer=lambda raw: raw,
            response_deserializer=json.loads,
        )
        reply = call(json.dumps(fields).encode(), timeout=TIMEOUT_S)
    assert reply["status"]["code"] == Code.OK, reply
    return reply["result"]


def meta(client_id: str) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id)]


@pytest.fixture(scope="module")
def stub(broker_process: BrokerProcess) -> Iterator[Any]:
    with grpc.insecure_channel(broker_process.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


class RawStream:
    """A Telemetry stream driven by hand: ``send`` commands, ``next`` replies."""

    def __init__(self, stub: Any, client_id: str | None) -> None:
        self._out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        metadata = meta(client_id) if client_id else []
        self.call = stub.Telemetry(iter(self._out.get, None), metadata=metadata, timeout=60)

    def send(self, command: Any) -> None:
        self._out.put(command)

    def next(self) -> Any:
        return next(self.call)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()


@pytest.fixture
def streams(stub: Any) -> Iterator[Any]:
    opened: list[RawStream] = []

    def open_stream(client_id: str | None) -> RawStream:
        opened.append(RawStream(stub, client_id))
        return opened[-1]

    yield open_stream
    for stream in opened:
        stream.close()


def producer_settings(*topics: str) -> Any:
    return service_pb2.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics]),
        )
    )


def consumer_settings(
    group: str, *topics: str, client_type: int = pb.ClientType.PUSH_CONSUMER
) -> Any:
    entries = [
        pb.SubscriptionEntry(
            topic=pb.Resource(name=t),
            expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
        )
        for t in topics
    ]
    return service_pb2.TelemetryCommand(
        settings=pb.Settings(
            client_type=client_type,
            subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=entries),
        )
    )


# ---- QueryRoute -----------------------------------------------------------------------------


def route(stub: Any, topic: str) -> Any:
    request = service_pb2.QueryRouteRequest(topic=pb.Resource(name=topic))
    return stub.QueryRoute(request, timeout=TIMEOUT_S)


def test_route_lists_every_queue_with_its_permission(broker_process, stub) -> None:
    admin(broker_process.endpoint, "CreateTopic", name="route-rw", read_queues=4, write_queues=2)
    reply = route(stub, "route-rw")
    assert reply.status.code == Code.OK
    assert [(q.id, q.permission) for q in reply.message_queues] == [
        (0, pb.Permission.READ_WRITE),
        (1, pb.Permission.READ_WRITE),
        (2, pb.Permission.READ),
        (3, pb.Permission.READ),
    ]
    host, port = broker_process.endpoint.rsplit(":", 1)
    for queue_proto in reply.message_queues:
        assert queue_proto.topic.name == "route-rw"
        assert queue_proto.broker.name == "broker-a" and queue_proto.broker.id == 0
        assert queue_proto.broker.endpoints.scheme == pb.AddressScheme.IPv4
        assert [(a.host, a.port) for a in queue_proto.broker.endpoints.addresses] == [
            (host, int(port))
        ]
        assert sorted(queue_proto.accept_message_types) == [
            pb.MessageType.NORMAL,
            pb.MessageType.FIFO,
            pb.MessageType.DELAY,
            pb.MessageType.TRANSACTION,
            pb.MessageType.PRIORITY,
        ]


def test_route_of_typed_and_read_only_topics(broker_process, stub) -> None:
    admin(broker_process.endpoint, "CreateTopic", name="route-fifo", queues=2, message_type="FIFO")
    admin(broker_process.endpoint, "CreateTopic", name="route-ro", queues=2, perm=4)
    fifo = route(stub, "route-fifo")
    assert {tuple(q.accept_message_types) for q in fifo.message_queues} == {(pb.MessageType.FIFO,)}
    read_only = route(stub, "route-ro")
    assert [q.permission for q in read_only.message_queues] == [pb.Permission.READ] * 2


def test_route_of_unknown_topic_is_not_found_and_creates_nothing(broker_process, stub) -> None:
    """A consumer's typo must not create a topic (issue 13 item 17): only sends do."""
    reply = route(stub, "route-typo")
    assert reply.status.code == Code.TOPIC_NOT_FOUND and "route-typo" in reply.status.message
    assert not reply.message_queues
    listed = {t["name"] for t in admin(broker_process.endpoint, "ListTopics")}
    assert "route-typo" not in listed
    with RocketMQClient(broker_process.endpoint) as client:  # a send still auto-creates
        client.send("route-typo", b"first")
    assert len(route(stub, "route-typo").message_queues) == 4  # default_queue_nums


def test_official_consumer_of_unknown_topic_gets_topic_not_found(broker_process) -> None:
    consumer = SimpleConsumer(
        ClientConfiguration(broker_process.endpoint, Credentials()),
        "route-typo-group",
        {"no-such-topic": FilterExpression()},
    )
    consumer.startup()
    try:
        with pytest.raises(Exception, match="failed to fetch topic:no-such-topic route"):
            consumer.receive(1, 5)
    finally:
        consumer.shutdown()
    listed = {t["name"] for t in admin(broker_process.endpoint, "ListTopics")}
    assert "no-such-topic" not in listed


@pytest.mark.parametrize("name", ["", "bad topic!", "x" * 200])
def test_route_of_illegal_topic_name(stub, name) -> None:
    reply = route(stub, name)
    assert reply.status.code == Code.ILLEGAL_TOPIC
    assert not reply.message_queues


def test_route_without_auto_create_is_topic_not_found(tmp_path) -> None:
    proc = start_broker(tmp_path, config={"broker": {"auto_create_topics": False}})
    try:
        with grpc.insecure_channel(proc.endpoint) as channel:
            reply = route(service_pb2_grpc.MessagingServiceStub(channel), "nowhere")
        assert reply.status.code == Code.TOPIC_NOT_FOUND
        assert "nowhere" in reply.status.message
    finally:
        assert proc.stop() == 0


# ---- Heartbeat ------------------------------------------------------------------------------


def test_heartbeat_needs_a_client_id(stub) -> None:
    reply = stub.Heartbeat(
        service_pb2.HeartbeatRequest(client_type=pb.ClientType.PRODUCER), timeout=TIMEOUT_S
    )
    assert reply.status.code == Code.BAD_REQUEST
    assert "x-mq-client-id" in reply.status.message


def test_heartbeat_of_producer_and_consumer(stub) -> None:
    producer = service_pb2.HeartbeatRequest(client_type=pb.ClientType.PRODUCER)
    assert stub.Heartbeat(producer, metadata=meta("hb-p"), timeout=TIMEOUT_S).status.code == 20000
    consumer = service_pb2.HeartbeatRequest(
        client_type=pb.ClientType.SIMPLE_CONSUMER, group=pb.Resource(name="hb-group")
    )
    assert stub.Heartbeat(consumer, metadata=meta("hb-c"), timeout=TIMEOUT_S).status.code == 20000


def test_heartbeat_with_illegal_group(stub) -> None:
    request = service_pb2.HeartbeatRequest(
        client_type=pb.ClientType.PUSH_CONSUMER, group=pb.Resource(name="bad group")
    )
    reply = stub.Heartbeat(request, metadata=meta("hb-bad"), timeout=TIMEOUT_S)
    assert reply.status.code == Code.ILLEGAL_CONSUMER_GROUP


# ---- Telemetry ------------------------------------------------------------------------------


def test_producer_settings_handshake(streams) -> None:
    stream = streams("tm-producer")
    stream.send(producer_settings("tm-topic"))
    reply = stream.next()
    assert reply.status.code == Code.OK
    settings = reply.settings
    assert settings.client_type == pb.ClientType.PRODUCER
    assert settings.publishing.max_body_size == 4 * 1024 * 1024  # the store's max_body_bytes
    assert settings.publishing.validate_message_type
    assert [t.name for t in settings.publishing.topics] == ["tm-topic"]
    assert settings.backoff_policy.max_attempts == 3
    assert settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"


def test_consumer_settings_carry_the_group_policy(broker_process, streams) -> None:
    admin(
        broker_process.endpoint,
        "CreateGroup",
        name="tm-fifo",
        fifo=True,
        max_retries=5,
        retry_backoff="1s,5s",
    )
    stream = streams("tm-consumer")
    stream.send(consumer_settings("tm-fifo", "tm-topic"))
    reply = stream.next()
    assert reply.status.code == Code.OK
    sub = reply.settings.subscription
    assert sub.fifo and sub.receive_batch_size == 32
    assert sub.long_polling_timeout.seconds == 30
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 6
    assert [d.seconds for d in policy.customized_backoff.next] == [1, 5]


def test_consumer_settings_with_exponential_and_default_backoff(broker_process, streams) -> None:
    admin(
        broker_process.endpoint,
        "CreateGroup",
        name="tm-exp",
        retry_backoff={
            "type": "exponential",
            "initial_ms": 1000,
            "multiplier": 2.0,
            "max_ms": 60000,
        },
    )
    stream = streams("tm-exp-consumer")
    stream.send(consumer_settings("tm-exp", "tm-topic"))
    exponential = stream.next().settings.backoff_policy.exponential_backoff
    assert (exponential.initial.seconds, exponential.max.seconds, exponential.multiplier) == (
        1,
        60,
        2.0,
    )
    stream.send(consumer_settings("tm-default-group", "tm-topic"))
    policy = stream.next().settings.backoff_policy
    delays_s = [d.seconds for d in policy.customized_backoff.next]
    assert policy.max_attempts == 17 and not stream.call.done()
    assert delays_s[:3] == [10, 30, 60] and delays_s[-1] == 7200 and len(delays_s) == 16


def test_telemetry_without_client_id_is_refused(streams) -> None:
    stream = streams(None)
    stream.send(producer_settings("tm-topic"))
    assert stream.next().status.code == Code.BAD_REQUEST
    with pytest.raises(StopIteration):
        stream.next()


def test_bad_settings_get_a_status_and_the_stream_lives_on(streams) -> None:
    stream = streams("tm-bad")
    stream.send(service_pb2.TelemetryCommand(settings=pb.Settings()))
    assert stream.next().status.code == Code.BAD_REQUEST
    stream.send(consumer_settings("bad group", "tm-topic"))
    assert stream.next().status.code == Code.ILLEGAL_CONSUMER_GROUP
    stream.send(consumer_settings("g", "t", client_type=99))
    assert stream.next().status.code == Code.BAD_REQUEST
    stream.send(service_pb2.TelemetryCommand())
    assert stream.next().status.code == Code.BAD_REQUEST
    stream.send(producer_settings("tm-topic"))
    assert stream.next().status.code == Code.OK


class _Listener(MessageListener):
    def consume(self, message: Any) -> ConsumeResult:
        return ConsumeResult.SUCCESS


def test_official_push_consumer_gets_its_settings(broker_process) -> None:
    admin(broker_process.endpoint, "CreateGroup", name="tm-push-fifo", fifo=True)
    admin(broker_process.endpoint, "CreateTopic", name="tm-push")
    consumer = PushConsumer(
        ClientConfiguration(broker_process.endpoint, Credentials()),
        "tm-push-fifo",
        _Listener(),
        {"tm-push": FilterExpression()},
    )
    consumer.startup()  # waits for the server's settings; fails after 10 s without them
    try:
        assert consumer.fifo
        assert consumer.receive_batch_size == 32 and consumer.long_polling_timeout == 30
    finally:
        consumer.shutdown()


# ---- QueryAssignment and NotifyClientTermination ------------------------------------------


def assignment(stub: Any, client_id: str, group: str, topic: str) -> Any:
    request = service_pb2.QueryAssignmentRequest(
        topic=pb.Resource(name=topic), group=pb.Resource(name=group)
    )
    return stub.QueryAssignment(request, metadata=meta(client_id), timeout=TIMEOUT_S)


def assigned_ids(stub: Any, client_id: str, group: str, topic: str) -> list[int]:
    reply = assignment(stub, client_id, group, topic)
    assert reply.status.code == Code.OK, reply.status
    return sorted(a.message_queue.id for a in reply.assignments)


def test_assignments_share_the_queues_among_the_group(broker_process, stub, streams) -> None:
    admin(broker_process.endpoint, "CreateTopic", name="as-topic", queues=6)
    for client_id in ("as-c1", "as-c2"):
        stream = streams(client_id)
        stream.send(consumer_settings("as-group", "as-topic"))
        assert stream.next().status.code == Code.OK
    first = assigned_ids(stub, "as-c1", "as-group", "as-topic")
    second = assigned_ids(stub, "as-c2", "as-group", "as-topic")
    assert first and second and sorted(first + second) == list(range(6))
    queue_proto = assignment(stub, "as-c1", "as-group", "as-topic").assignments[0].message_queue
    assert queue_proto.permission == pb.Permission.READ_WRITE
    assert queue_proto == route(stub, "as-topic").message_queues[queue_proto.id]

    request = service_pb2.NotifyClientTerminationRequest(group=pb.Resource(name="as-group"))
    reply = stub.NotifyClientTermination(request, metadata=meta("as-c2"), timeout=TIMEOUT_S)
    assert reply.status.code == Code.OK
    assert assigned_ids(stub, "as-c1", "as-group", "as-topic") == list(range(6))


def test_assignment_registers_an_unknown_consumer(broker_process, stub) -> None:
    admin(broker_process.endpoint, "CreateTopic", name="as-solo", queues=3)
    assert assigned_ids(stub, "as-solo-c", "as-solo-group", "as-solo") == [0, 1, 2]


def test_assignment_of_bad_requests(stub) -> None:
    assert assignment(stub, "as-x", "as-group", "as-missing").status.code == Code.TOPIC_NOT_FOUND
    assert assignment(stub, "as-x", "bad group", "as-topic").status.code == (
        Code.ILLEGAL_CONSUMER_GROUP
    )
    request = service_pb2.QueryAssignmentRequest(
        topic=pb.Resource(name="as-topic"), group=pb.Resource(name="as-group")
    )
    assert stub.QueryAssignment(request, timeout=TIMEOUT_S).status.code == Code.BAD_REQUEST


def test_termination_retires_the_stream(stub, streams) -> None:
    stream = streams("nt-producer")
    stream.send(producer_settings("nt-topic"))
    assert stream.next().status.code == Code.OK
    reply = stub.NotifyClientTermination(
        service_pb2.NotifyClientTerminationRequest(),
        metadata=meta("nt-producer"),
        timeout=TIMEOUT_S,
    )
    assert reply.status.code == Code.OK
    ended = threading.Event()

    def drain() -> None:
        for _ in stream.call:
            pass
        ended.set()

    started = time.monotonic()
    threading.Thread(target=drain, daemon=True).start()
    assert ended.wait(15), "the server did not end a terminated client's stream"
    assert time.monotonic() - started < 10
    again = stub.NotifyClientTermination(
        service_pb2.NotifyClientTerminationRequest(),
        metadata=meta("nt-producer"),
        timeout=TIMEOUT_S,
    )
    assert again.status.code == Code.OK  # idempotent
