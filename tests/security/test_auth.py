"""Authentication and authorization against a real broker with [auth] on: the official
client, our client, the CLI, raw stubs with forged headers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
from rocketmq.v5.exception.client_exception import ForbiddenException
from rocketmq.v5.util.signature import Signature

from broker_core.auth.signature import utc_stamp
from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.errors import PermissionDeniedError, UnauthorizedError
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET
from tests.server.conftest import BrokerProcess
from tests.server.test_pull_and_offsets import client_message

Code = pb.Code


def official_headers(access_key: str, secret_key: str, stamp: str | None = None) -> list:
    """What the official client sends (its own Signature.sign), optionally another stamp."""
    stamp = stamp or utc_stamp()
    header = (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
        f"Signature={Signature.sign(secret_key, stamp)}"
    )
    return [("x-mq-date-time", stamp), ("authorization", header), ("x-mq-client-id", "t@1")]


def route(endpoint: str, topic: str, metadata: list) -> Any:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=metadata,
            timeout=5,
        )


def raw_send(endpoint: str, topic: str, metadata: list) -> Any:
    request = service_pb2.SendMessageRequest(
        messages=[
            pb.Message(
                topic=pb.Resource(name=topic),
                body=b"forged",
                system_properties=pb.SystemProperties(
                    message_id="01" + "0" * 32,
                    body_encoding=pb.Encoding.IDENTITY,
                    message_type=pb.MessageType.NORMAL,
                ),
            )
        ]
    )
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return stub.SendMessage(request, metadata=metadata, timeout=5)


@pytest.fixture(scope="module")
def admin(auth_broker: BrokerProcess) -> Iterator[RocketMQClient]:
    with RocketMQClient(
        auth_broker.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET
    ) as client:
        for topic in ("orders", "payments", "audit-x"):
            client.create_topic(topic, queues=2)
        client.create_group("GID_orders", consume_from_where="first_offset")  # reads old ones
        client.create_user("alice", "alice-secret")
        client.create_acl("alice", "Topic:orders", ["Pub"])
        client.create_user("bob", "bob-secret")
        client.create_acl("bob", "Topic:*", ["Pub", "Sub"])
        client.create_acl("bob", "Topic:payments", ["Pub"], decision="Deny")
        client.create_acl("bob", "Group:GID_*", ["Sub"])
        client.create_user("dave", "dave-secret")  # owns the payments transactions
        client.create_acl("dave", "Topic:payments", ["Pub"])
        yield client


def max_offsets(client: RocketMQClient, topic: str) -> int:
    return sum(row["max_offset"] for row in client.topic_status(topic))


def official(endpoint: str, key: str, secret: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(key, secret), request_timeout=5)


def test_official_producer_and_simple_consumer_with_the_right_keys(auth_broker, admin) -> None:
    producer = Producer(official(auth_broker.endpoint, ADMIN_KEY, ADMIN_SECRET), ("orders",))
    producer.startup()
    try:
        receipt = producer.send(client_message("orders", b"signed"))
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(
        official(auth_broker.endpoint, ADMIN_KEY, ADMIN_SECRET),
        "GID_orders",
        {"orders": FilterExpression()},
        await_duration=2,
    )
    consumer.startup()
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = consumer.receive(16, 20)
        assert [m.message_id for m in got] == [receipt.message_id]
        consumer.ack(got[0])
    finally:
        consumer.shutdown()


@pytest.mark.parametrize(
    ("key", "secret", "reason"),
    [
        (ADMIN_KEY, "wrong-secret", "wrong secret key"),
        ("nobody", "whatever-secret", "unknown access key 'nobody'"),
    ],
)
def test_wrong_secret_or_unknown_key_is_unauthorized_and_stores_nothing(
    auth_broker, admin, key, secret, reason
) -> None:
    before = max_offsets(admin, "orders")
    reply = route(auth_broker.endpoint, "orders", official_headers(key, secret))
    assert reply.status.code == Code.UNAUTHORIZED and reason in reply.status.message
    sent = raw_send(auth_broker.endpoint, "orders", official_headers(key, secret))
    assert sent.status.code == Code.UNAUTHORIZED
    producer = Producer(official(auth_broker.endpoint, key, secret), ("orders",))
    producer.startup()
    try:
        with pytest.raises(Exception, match="route"):
            producer.send(client_message("orders", b"never stored"))
    finally:
        producer.shutdown()
    assert max_offsets(admin, "orders") == before
    with (
        RocketMQClient(auth_broker.endpoint, access_key=key, secret_key=secret) as ours,
        pytest.raises(UnauthorizedError, match=reason),
    ):
        ours.send_batch("orders", [(b"never",)])
    assert max_offsets(admin, "orders") == before


def test_unsigned_stale_and_telemetry_calls_are_unauthorized(auth_broker, admin) -> None:
    assert route(auth_broker.endpoint, "orders", []).status.code == Code.UNAUTHORIZED
    old = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 2 * 86_400))
    stale = route(auth_broker.endpoint, "orders", official_headers(ADMIN_KEY, ADMIN_SECRET, old))
    assert stale.status.code == Code.UNAUTHORIZED and "clock skew" in stale.status.message
    with grpc.insecure_channel(auth_broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        replies = list(stub.Telemetry(iter([service_pb2.TelemetryCommand()]), timeout=5))
    assert [r.status.code for r in replies] == [Code.UNAUTHORIZED]
    with (
        RocketMQClient(auth_broker.endpoint) as unsigned,
        pytest.raises(UnauthorizedError, match="not signed"),
    ):
        unsigned.list_topics()


def test_pub_on_orders_only(auth_broker, admin) -> None:
    before = max_offsets(admin, "payments")
    assert (
        route(auth_broker.endpoint, "orders", official_headers("alice", "alice-secret")).status.code
        == Code.OK
    )
    denied = raw_send(auth_broker.endpoint, "payments", official_headers("alice", "alice-secret"))
    assert denied.status.code == Code.FORBIDDEN
    assert "may not Pub on Topic:payments" in denied.status.message
    producer = Producer(official(auth_broker.endpoint, "alice", "alice-secret"), ())
    producer.startup()
    try:
        producer.send(client_message("orders", b"from alice"))
        with pytest.raises(Exception, match="route"):
            producer.send(client_message("payments", b"never"))
    finally:
        producer.shutdown()
    assert max_offsets(admin, "payments") == before
    consumer = SimpleConsumer(
        official(auth_broker.endpoint, "alice", "alice-secret"),
        "GID_orders",
        {"orders": FilterExpression()},
        await_duration=1,
    )
    consumer.startup()
    try:
        with pytest.raises(ForbiddenException, match="Sub"):
            consumer.receive(16, 20)
    finally:
        consumer.shutdown()
    with RocketMQClient(
        auth_broker.endpoint, access_key="alice", secret_key="alice-secret"
    ) as alice:
        with pytest.raises(PermissionDeniedError):
            alice.pull("GID_orders", "orders", 0, 0, 10)
        with pytest.raises(PermissionDeniedError, match="Create or Update on Topic:new"):
            alice.create_topic("new")
        with pytest.raises(PermissionDeniedError, match="super users only"):
            alice.list_users()


def test_deny_beats_allow(auth_broker, admin) -> None:
    assert (
        raw_send(auth_broker.endpoint, "audit-x", official_headers("bob", "bob-secret")).status.code
        == Code.OK
    )
    denied = raw_send(auth_broker.endpoint, "payments", official_headers("bob", "bob-secret"))
    assert denied.status.code == Code.FORBIDDEN
    with RocketMQClient(auth_broker.endpoint, access_key="bob", secret_key="bob-secret") as bob:
        batch = bob.pull("GID_orders", "orders", 0, 0, 10)  # Sub on Topic:* and Group:GID_*
        assert batch.next_offset >= 0


def grpc_call(endpoint: str, method: str, request: Any, metadata: list) -> Any:
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return getattr(stub, method)(request, metadata=metadata, timeout=5)


def end_half(endpoint: str, topic: str, message_id: str, tx_id: str, metadata: list) -> Any:
    request = service_pb2.EndTransactionRequest(
        topic=pb.Resource(name=topic),
        message_id=message_id,
        transaction_id=tx_id,
        resolution=pb.TransactionResolution.COMMIT,
        source=pb.TransactionSource.SOURCE_CLIENT,
    )
    return grpc_call(endpoint, "EndTransaction", request, metadata)


def test_end_transaction_of_another_topics_half_is_refused(auth_broker, admin) -> None:
    """Alice (Pub on orders) cannot commit dave's payments half, not even by naming
    orders, the topic she may Pub on; dave can."""
    dave = official_headers("dave", "dave-secret")
    half = pb.Message(
        topic=pb.Resource(name="payments"),
        body=b"dave's payment",
        system_properties=pb.SystemProperties(
            message_id="01" + "D" * 32,
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.TRANSACTION,
        ),
    )
    request = service_pb2.SendMessageRequest(messages=[half])
    sent = grpc_call(auth_broker.endpoint, "SendMessage", request, dave)
    assert sent.status.code == Code.OK, sent.status.message
    message_id, tx_id = sent.entries[0].message_id, sent.entries[0].transaction_id
    before = max_offsets(admin, "payments")
    alice = official_headers("alice", "alice-secret")
    denied = end_half(auth_broker.endpoint, "payments", message_id, tx_id, alice)
    assert denied.status.code == Code.FORBIDDEN
    assert "may not Pub on Topic:payments" in denied.status.message
    disguised = end_half(auth_broker.endpoint, "orders", message_id, tx_id, alice)
    assert disguised.status.code == Code.MESSAGE_NOT_FOUND
    assert f"no unresolved half message {message_id} in topic orders" in disguised.status.message
    assert max_offsets(admin, "payments") == before
    done = end_half(auth_broker.endpoint, "payments", message_id, tx_id, dave)
    assert done.status.code == Code.OK, done.status.message
    assert max_offsets(admin, "payments") == before + 1


def test_recall_of_another_topics_timed_message_is_refused(auth_broker, admin) -> None:
    dave = official_headers("dave", "dave-secret")
    timed = pb.Message(
        topic=pb.Resource(name="payments"),
        body=b"dave's timed payment",
        system_properties=pb.SystemProperties(
            message_id="01" + "E" * 32,
            body_encoding=pb.Encoding.IDENTITY,
            message_type=pb.MessageType.DELAY,
            delivery_timestamp=Timestamp(seconds=int(time.time()) + 3600),
        ),
    )
    request = service_pb2.SendMessageRequest(messages=[timed])
    sent = grpc_call(auth_broker.endpoint, "SendMessage", request, dave)
    assert sent.status.code == Code.OK, sent.status.message
    handle = sent.entries[0].recall_handle
    assert handle

    def recall(topic: str, metadata: list) -> Any:
        recall = service_pb2.RecallMessageRequest(
            topic=pb.Resource(name=topic), recall_handle=handle
        )
        return grpc_call(auth_broker.endpoint, "RecallMessage", recall, metadata)

    alice = official_headers("alice", "alice-secret")
    assert recall("payments", alice).status.code == Code.FORBIDDEN
    disguised = recall("orders", alice)
    assert disguised.status.code == Code.NOT_FOUND
    assert "no pending timed message of topic orders" in disguised.status.message
    assert recall("payments", dave).status.code == Code.OK


def test_cli_signs_with_environment_keys(auth_broker, admin) -> None:
    env = {"RMQ_ACCESS_KEY": ADMIN_KEY, "RMQ_SECRET_KEY": ADMIN_SECRET}
    runner = CliRunner()
    ep = ["--endpoints", auth_broker.endpoint]
    made = runner.invoke(
        cli, ["user", "create", "carol", "--secret-key", "carol-secret", *ep], env=env
    )
    assert made.exit_code == 0, made.output
    rule = runner.invoke(
        cli,
        [
            "acl",
            "create",
            "--user",
            "carol",
            "--resource",
            "Topic:orders",
            "--actions",
            "Pub",
            "--decision",
            "Allow",
            *ep,
        ],
        env=env,
    )
    assert rule.exit_code == 0 and "Allow Pub on Topic:orders for carol" in rule.output
    listed = runner.invoke(cli, ["acl", "list", "--user", "carol", *ep], env=env)
    assert "Topic:orders" in listed.output and "carol-secret" not in listed.output
    users = runner.invoke(cli, ["user", "list", *ep], env=env)
    assert "carol" in users.output and "secret" not in users.output
    unsigned = runner.invoke(
        cli, ["topic", "list", *ep], env={"RMQ_ACCESS_KEY": "", "RMQ_SECRET_KEY": ""}
    )
    assert unsigned.exit_code == 1 and "not signed" in unsigned.output
    gone = runner.invoke(cli, ["user", "delete", "carol", *ep], env=env)
    assert gone.exit_code == 0
    assert (
        route(auth_broker.endpoint, "orders", official_headers("carol", "carol-secret")).status.code
        == Code.UNAUTHORIZED
    )


def test_health_needs_no_credentials(auth_broker) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(auth_broker.endpoint) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
