"""A NameServer and three broker processes (a, b, c): routes, admin, the official client
through one broker, forwarding, and no topic created by a route lookup."""

from __future__ import annotations

import collections
import json
import pickle
import threading
import time
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
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

from broker_core.broker.pop.receipt import ReceiptHandle
from broker_core.cli import cli
from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.cluster.local import LocalCluster, free_port
from broker_core.errors import RocketMQError, TopicNotFoundError
from broker_core.namesrv.client import NameServerClient
from broker_core.namesrv.model import BrokerRegistration, DataVersion
from tests.cluster_procs import send_numbered
from tests.server.test_pull_and_offsets import split_stream
from tests.server.test_simple_consumer import ack, ack_entry, change_invisible, receive

Code = pb.Code
BROKERS = ("broker-a", "broker-b", "broker-c")


def rmq(*args: str) -> str:
    """Run ``rmq ARGS`` in process; its output (fails the test on a non-zero exit)."""
    result = CliRunner(env={"COLUMNS": "250"}).invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_cluster_list_fits_80_columns_unfolded(cluster3) -> None:
    """Each broker on one line of at most 80 characters: name, id, both addresses whole."""
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        cli, ["cluster", "list", "--namesrv", cluster3.namesrv]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    for name, endpoint in cluster3.endpoints.items():
        row = next(line for line in lines if f" {name} " in line)
        assert endpoint in row and " 0 " in row, result.output


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def route_brokers(endpoint: str, topic: str) -> collections.Counter[str]:
    """Queue count per broker group in the QueryRoute answer of the broker at ``endpoint``."""
    with grpc.insecure_channel(endpoint) as channel:
        reply = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
            service_pb2.QueryRouteRequest(topic=pb.Resource(name=topic)), timeout=10
        )
    if reply.status.code != Code.OK:
        return collections.Counter()
    return collections.Counter(q.broker.name for q in reply.message_queues)


def create_everywhere(cluster: LocalCluster, topic: str, queues: int = 4) -> None:
    """``rmq topic create --namesrv``, then wait until every broker's route has it."""
    out = rmq("topic", "create", topic, "--queues", str(queues), "--namesrv", cluster.namesrv)
    assert all(f"on {name}" in out for name in cluster.brokers), out
    expected = {name: queues for name in cluster.brokers}
    for endpoint in cluster.endpoints.values():
        wait_for(
            lambda e=endpoint: route_brokers(e, topic) == expected,
            10,
            f"the route of {topic} on {endpoint}",
        )


def held(cluster: LocalCluster, topic: str) -> dict[str, int]:
    """Messages each broker group holds in ``topic`` (admin TopicStatus on each)."""
    out = {}
    for name, endpoint in cluster.endpoints.items():
        with RocketMQClient(endpoint) as client:
            out[name] = sum(r["max_offset"] - r["min_offset"] for r in client.topic_status(topic))
    return out


# ---- admin across the cluster ---------------------------------------------------------------


def test_cluster_list_and_topic_create_on_every_group_or_one(cluster3) -> None:
    listing = rmq("cluster", "list", "--namesrv", cluster3.namesrv)
    for name, endpoint in cluster3.endpoints.items():
        assert name in listing and endpoint in listing
    create_everywhere(cluster3, "adm-all", queues=2)
    with RocketMQClient(cluster3.endpoints["broker-b"]) as client:  # some puts on one group
        client.send_batch("adm-all", [OutgoingMessage(b"x")] * 50)
    assert "put TPS" in rmq("cluster", "list", "--namesrv", cluster3.namesrv)
    with RocketMQClient(cluster3.endpoints["broker-b"]) as client:
        assert client.health()["put_tps"] > 0  # 50 stored since its last samples
    route = rmq("topic", "route", "adm-all", "--namesrv", cluster3.namesrv)
    assert all(name in route for name in BROKERS)
    out = rmq(
        "topic",
        "create",
        "adm-one",
        "--queues",
        "3",
        "--namesrv",
        cluster3.namesrv,
        "--broker",
        "broker-b",
    )
    assert "on broker-b" in out and "broker-a" not in out
    wait_for(
        lambda: route_brokers(cluster3.endpoints["broker-a"], "adm-one") == {"broker-b": 3},
        10,
        "adm-one on broker-b only",
    )
    bad = CliRunner().invoke(
        cli, ["topic", "create", "x", "--namesrv", cluster3.namesrv, "--broker", "broker-zz"]
    )
    assert bad.exit_code == 1 and "broker-zz" in bad.output
    listed = json.loads(rmq("topic", "list", "--json", "--namesrv", cluster3.namesrv))
    holders = {(t["name"], t["broker"]) for t in listed if t["name"].startswith("adm-")}
    assert holders == {("adm-all", b) for b in BROKERS} | {("adm-one", "broker-b")}
    assert "on broker-b" in rmq("topic", "delete", "adm-one", "--namesrv", cluster3.namesrv)
    listed = json.loads(rmq("topic", "list", "--json", "--namesrv", cluster3.namesrv))
    assert "adm-one" not in {t["name"] for t in listed}
    gone = CliRunner().invoke(cli, ["topic", "delete", "adm-one", "--namesrv", cluster3.namesrv])
    assert gone.exit_code == 1 and "on no broker of the cluster" in gone.output


def test_route_lookup_creates_no_topic_anywhere(cluster3) -> None:
    for endpoint in cluster3.endpoints.values():
        with grpc.insecure_channel(endpoint) as channel:
            reply = service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                service_pb2.QueryRouteRequest(topic=pb.Resource(name="typo-topic")), timeout=10
            )
        assert reply.status.code == Code.TOPIC_NOT_FOUND, reply.status
    ns = NameServerClient(cluster3.namesrv)
    try:
        with pytest.raises(TopicNotFoundError):
            ns.get_route("typo-topic")
    finally:
        ns.close()
    for endpoint in cluster3.endpoints.values():
        with RocketMQClient(endpoint) as client:
            assert "typo-topic" not in {t["name"] for t in client.list_topics()}


# ---- the official client through one broker ---------------------------------------------------


def send_and_receive_through_one_broker(cluster: LocalCluster, topic: str, count: int) -> None:
    """Send ``count`` messages with the official Producer and read them back with the
    official SimpleConsumer, both given broker-a's endpoint only; every body exactly once,
    and every broker group holds some."""
    endpoint = cluster.endpoints["broker-a"]
    create_everywhere(cluster, topic)
    send_numbered(endpoint, topic, count)
    holdings = held(cluster, topic)
    assert sum(holdings.values()) == count and all(holdings[name] > 0 for name in BROKERS), holdings
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()),
        f"GID-{topic}",
        {topic: FilterExpression()},
        await_duration=1,
    )
    consumer.startup()
    seen: collections.Counter[bytes] = collections.Counter()
    try:
        deadline = time.monotonic() + max(60, count / 100)
        while len(seen) < count and time.monotonic() < deadline:
            messages = consumer.receive(32, 120)
            for message in messages:
                seen[message.body] += 1
                consumer.ack(message)  # (ack_async of client 5.1 returns no future)
        assert len(seen) == count, f"received {len(seen)} of {count}"
        assert max(seen.values()) == 1, [b for b, n in seen.items() if n > 1][:5]
        for _ in range(len(BROKERS)):  # one more receive per broker group: nothing is left
            assert consumer.receive(32, 120) == []
    finally:
        consumer.shutdown()


def test_official_client_through_one_broker_reaches_every_group(cluster3) -> None:
    send_and_receive_through_one_broker(cluster3, "one-door", 300)


@pytest.mark.slow
def test_thirty_thousand_messages_through_one_broker(cluster3) -> None:
    send_and_receive_through_one_broker(cluster3, "one-door-30k", 30_000)


# ---- forwarding -------------------------------------------------------------------------------


def messages(stub: Any, topic: str, group: str) -> list[Any]:
    """The messages of one receive of up to 2 (none when there is nothing new)."""
    statuses, got, _ = split_stream(receive(stub, topic, group, batch=2))
    assert [s.code for s in statuses] in ([Code.OK], [Code.MESSAGE_NOT_FOUND]), statuses
    return got


def test_ack_and_invisible_change_at_the_wrong_broker_are_forwarded(cluster3) -> None:
    rmq(
        "topic",
        "create",
        "fwd",
        "--queues",
        "1",
        "--namesrv",
        cluster3.namesrv,
        "--broker",
        "broker-b",
    )
    with RocketMQClient(cluster3.endpoints["broker-b"]) as client:
        client.send_batch("fwd", [b"one", b"two"])
    channels = {n: grpc.insecure_channel(e) for n, e in cluster3.endpoints.items()}
    try:
        stubs = {n: service_pb2_grpc.MessagingServiceStub(c) for n, c in channels.items()}
        got: list[Any] = []
        wait_for(
            lambda: got.extend(messages(stubs["broker-b"], "fwd", "GID-fwd")) or len(got) == 2,
            10,
            "both messages received",
        )
        first, second = (m.system_properties.receipt_handle for m in got)
        changed = change_invisible(stubs["broker-a"], "fwd", "GID-fwd", first, 60_000)
        assert changed.status.code == Code.OK and changed.receipt_handle != first
        reply = ack(stubs["broker-c"], "fwd", "GID-fwd", changed.receipt_handle, second)
        assert [e.status.code for e in reply.entries] == [Code.OK, Code.OK], reply
        again = ack(stubs["broker-a"], "fwd", "GID-fwd", second)  # broker-b's answer
        assert again.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
        assert messages(stubs["broker-b"], "fwd", "GID-fwd") == []
        stray = ReceiptHandle("fwd", 0, 0, 1, 1, 1, "broker-zz").encode()
        lost = ack(stubs["broker-a"], "fwd", "GID-fwd", stray)
        assert lost.entries[0].status.code == Code.PROXY_TIMEOUT
        assert "broker-zz" in lost.entries[0].status.message
    finally:
        for channel in channels.values():
            channel.close()


def create_on_b(cluster3, topic: str) -> None:
    rmq(
        "topic",
        "create",
        topic,
        "--queues",
        "1",
        "--namesrv",
        cluster3.namesrv,
        "--broker",
        "broker-b",
    )


def _one_delivery_of_broker_b(cluster3, topic: str, stubs: dict[str, Any]) -> Any:
    create_on_b(cluster3, topic)
    with RocketMQClient(cluster3.endpoints["broker-b"]) as client:
        client.send_batch(topic, [b"only"])
    got: list[Any] = []
    wait_for(lambda: got.extend(messages(stubs["broker-b"], topic, "GID-fwd")) or got, 10, "it")
    return got[0]


def test_a_forwarded_call_is_never_forwarded_again(cluster3) -> None:
    """The loop guard: a call that arrives forwarded, for a handle of another broker, is
    answered with an error naming that broker; nothing is acked."""
    with (
        grpc.insecure_channel(cluster3.endpoints["broker-a"]) as a,
        grpc.insecure_channel(cluster3.endpoints["broker-b"]) as b,
    ):
        stubs = {
            "broker-a": service_pb2_grpc.MessagingServiceStub(a),
            "broker-b": service_pb2_grpc.MessagingServiceStub(b),
        }
        m = _one_delivery_of_broker_b(cluster3, "fwd-loop", stubs)
        request = service_pb2.AckMessageRequest(
            group=pb.Resource(name="GID-fwd"),
            topic=pb.Resource(name="fwd-loop"),
            entries=[ack_entry(m)],
        )
        looped = stubs["broker-a"].AckMessage(
            request, timeout=10, metadata=[("x-mq-forwarded-by", "broker-c")]
        )
        [entry] = looped.entries
        assert entry.status.code == Code.PROXY_TIMEOUT, entry.status
        assert "'broker-b'" in entry.status.message and "forwarded" in entry.status.message
        assert ack(stubs["broker-b"], "fwd-loop", "GID-fwd", m).entries[0].status.code == Code.OK


def test_forwarding_to_a_dead_master_answers_an_error_naming_it(cluster3) -> None:
    """broker-dead is registered (and heartbeats) but nothing listens at its gRPC address,
    as after a crash the NameServer has not noticed yet: an ack for its handle gets an
    error naming it and the failed call, not a hang and not OK."""
    dead_addr = f"127.0.0.1:{free_port()}"
    registration = BrokerRegistration(
        cluster="DefaultCluster",
        broker_name="broker-dead",
        broker_id=0,
        broker_addr=f"127.0.0.1:{free_port()}",
        grpc_addr=dead_addr,
        ha_addr="",
        topics={},
        data_version=DataVersion(0, int(time.time() * 1000), 1),
    )
    namesrv = NameServerClient(cluster3.namesrv)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.3):
            namesrv.broker_heartbeat("DefaultCluster", "broker-dead", 0, registration.broker_addr)

    beats = threading.Thread(target=heartbeat, name="dead-heartbeat")
    namesrv.register_broker(registration)
    beats.start()
    create_on_b(cluster3, "fwd-dead")
    handle = ReceiptHandle("fwd-dead", 0, 0, 1, 1, 1, "broker-dead").encode()
    try:
        with grpc.insecure_channel(cluster3.endpoints["broker-a"]) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)

            def answer() -> Any:
                return ack(stub, "fwd-dead", "GID-fwd", handle).entries[0].status

            # broker-a's cached cluster view (300 ms) learns of broker-dead
            wait_for(lambda: "not a live broker" not in answer().message, 10, "the route")
            status = answer()
    finally:
        stop.set()
        beats.join()
        namesrv.close()
    assert status.code == Code.PROXY_TIMEOUT, status
    assert f"forwarding AckMessage to broker 'broker-dead' at {dead_addr} failed" in (
        status.message
    )


# ---- our client over the cluster ---------------------------------------------------------------


def test_our_client_routes_sends_pulls_and_offsets_per_broker(cluster3) -> None:
    create_everywhere(cluster3, "ours", queues=2)
    with RocketMQClient(namesrv=cluster3.namesrv) as client:
        for i in range(6):
            client.send_batch("ours", [b"x%d-%d" % (i, j) for j in range(10)])
        queues = client.query_route("ours")
        assert {q.broker_name for q in queues} == set(BROKERS) and len(queues) == 6
        total = 0
        for q in queues:
            batch = client.pull("GID-ours", "ours", q.queue_id, 0, 100, broker=q.broker_name)
            total += len(batch.messages)
            client.update_offset(
                "GID-ours", "ours", q.queue_id, batch.next_offset, broker=q.broker_name
            )
            assert (
                client.get_offset("GID-ours", "ours", q.queue_id, broker=q.broker_name)
                == batch.next_offset
            )
        assert total == 60
        assert held(cluster3, "ours") == {name: 20 for name in BROKERS}
        with pytest.raises(Exception, match="broker-a, broker-b, broker-c"):
            client.pull("GID-ours", "ours", 0, 0, 1)  # which broker's queue 0?
    progress = rmq("group", "progress", "GID-ours", "--namesrv", cluster3.namesrv)
    assert all(name in progress for name in BROKERS) and "total lag 0" in progress


# ---- the official PushConsumer: QueryAssignment for the whole cluster -------------------------


class Collect(MessageListener):
    def __init__(self) -> None:
        self.bodies: collections.Counter[bytes] = collections.Counter()

    def consume(self, message: Any) -> ConsumeResult:
        self.bodies[message.body] += 1
        return ConsumeResult.SUCCESS


def test_official_push_consumer_through_one_broker_gets_every_group(cluster3) -> None:
    create_everywhere(cluster3, "pushed", queues=2)
    with RocketMQClient(namesrv=cluster3.namesrv) as client:
        for i in range(6):
            client.send_batch("pushed", [b"p%d-%d" % (i, j) for j in range(10)])
    assert held(cluster3, "pushed") == {name: 20 for name in BROKERS}
    listener = Collect()
    consumer = PushConsumer(
        ClientConfiguration(cluster3.endpoints["broker-c"], Credentials()),
        "GID-pushed",
        listener,
        {"pushed": FilterExpression()},
    )
    consumer.startup()
    try:
        wait_for(lambda: len(listener.bodies) == 60, 30, "all 60 messages pushed")
    finally:
        consumer.shutdown()
    assert max(listener.bodies.values()) == 1


def test_cluster_client_pickles_and_names_an_unreachable_namesrv(cluster3) -> None:
    create_everywhere(cluster3, "pickled", queues=1)
    client = RocketMQClient(namesrv=cluster3.namesrv)
    try:
        client.send_batch("pickled", [b"one"])
        copy = pickle.loads(pickle.dumps(client))
        try:
            copy.send_batch("pickled", [b"two"])
            assert sum(held(cluster3, "pickled").values()) == 2
        finally:
            copy.close()
    finally:
        client.close()
    with (
        RocketMQClient(namesrv="127.0.0.1:1") as nowhere,
        pytest.raises(RocketMQError, match=r"127\.0\.0\.1:1"),
    ):
        nowhere.send_batch("pickled", [b"lost"])


def test_message_groups_stay_on_one_broker_group_and_in_order(cluster3) -> None:
    create_everywhere(cluster3, "fifo-c", queues=2)
    with RocketMQClient(namesrv=cluster3.namesrv) as client:
        for round_ in range(4):
            client.send_batch(
                "fifo-c",
                [
                    OutgoingMessage(b"%s-%d" % (g.encode(), round_), message_group=g)
                    for g in ("g1", "g2", "g3", "g4", "g5")
                ]
                + [b"free"],
            )
            client.send_columns("fifo-c", [b"c-%d" % round_], message_groups=["g1"])
        where: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
        order: dict[str, list[bytes]] = collections.defaultdict(list)
        for broker, single in client.broker_clients("fifo-c").items():
            for q in single.query_route("fifo-c"):
                if q.broker_name != broker:
                    continue
                for m in single.pull("GID-fifo-c", "fifo-c", q.queue_id, 0, 100).messages:
                    if m.message_group:
                        where[m.message_group].add((broker, q.queue_id))
                        order[m.message_group].append(m.body)
    assert set(where) == {"g1", "g2", "g3", "g4", "g5"}
    assert all(len(places) == 1 for places in where.values()), where  # one queue each
    assert len({next(iter(p))[0] for p in where.values()}) > 1  # spread over groups
    assert order["g2"] == [b"g2-%d" % r for r in range(4)]
    assert [b for b in order["g1"] if b.startswith(b"c-")] == [b"c-%d" % r for r in range(4)]
