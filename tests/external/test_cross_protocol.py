"""One topic, two protocols at once: the C++ remoting client and gRPC clients (the official
``rocketmq`` Producer and our own ``RocketMQClient``) on the same broker see the same
messages, and offsets committed over one protocol are read over the other."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from rocketmq import ClientConfiguration, Credentials, Message, Producer

from broker_core.client.client import RocketMQClient
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode
from broker_core.remoting.command import RemotingCommand
from tests.external.conftest import Cluster4x
from tests.external.test_cpp_client import consumer, create_topic, produce


def remoting_offset(cluster: Cluster4x, group: str, topic: str, queue_id: int) -> int:
    """QUERY_CONSUMER_OFFSET over remoting (-1 when the broker has none)."""
    client = RemotingClient(cluster.remoting)
    try:
        resp = client.invoke(
            RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)},
            ),
            5.0,
        )
    finally:
        client.close()
    return int(resp.ext_fields["offset"]) if resp.code == 0 else -1


def test_same_topic_over_remoting_and_grpc(cpp_python: Path, cluster4x: Cluster4x) -> None:
    create_topic(cluster4x, "both")
    produce(cpp_python, cluster4x, "both", 20, "--body-prefix", "cpp")  # remoting producer
    official = Producer(ClientConfiguration(cluster4x.grpc, Credentials()), ["both"])
    official.startup()
    try:
        for i in range(20):  # gRPC producer (the official RocketMQ 5 client)
            msg = Message()
            msg.topic, msg.body, msg.tag = "both", f"grpc-{i}".encode(), "TagG"
            official.send(msg)
    finally:
        official.shutdown()
    want = {f"cpp-{i}" for i in range(20)} | {f"grpc-{i}" for i in range(20)}
    with RocketMQClient(cluster4x.grpc) as client:  # gRPC reader sees both producers
        pulled = {
            m.body.decode()
            for q in range(4)
            for m in client.pull("both-grpc", "both", q, 0, 100).messages
        }
    assert pulled == want
    sub = consumer(cpp_python, cluster4x, "both", "both-cpp")  # remoting reader too
    try:
        got = Counter(str(x["body"]) for x in sub.wait_for(40, 60))
        assert set(got) == want and max(got.values()) == 1
        # The C++ consumer commits its offsets over remoting; gRPC reads them.
        with RocketMQClient(cluster4x.grpc) as client:
            deadline = time.monotonic() + 20
            while True:
                committed = {q: client.get_offset("both-cpp", "both", q) for q in range(4)}
                if sum(committed.values()) == 40 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert sum(committed.values()) == 40, committed
    finally:
        assert sub.stop() == 0
    # An offset committed over gRPC is what a remoting client reads.
    with RocketMQClient(cluster4x.grpc) as client:
        client.update_offset("both-moved", "both", 2, 3)
    assert remoting_offset(cluster4x, "both-moved", "both", 2) == 3
