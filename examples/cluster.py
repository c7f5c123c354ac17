"""A cluster on one machine: ``python -m examples.cluster``.

Starts a NameServer and two broker groups (``broker-a``, ``broker-b``) on free loopback
ports, as ``rmq cluster up --brokers 2`` does, creates topic ``orders`` with 2 queues on
every group, then:

1. sends 100 messages with the official ``rocketmq`` Producer given ONE broker's
   endpoint: its route (from that broker, for the whole cluster) spreads them over
   both groups;
2. receives and acks them all with the official SimpleConsumer, again through one
   broker: each ack goes to the broker that delivered the message;
3. reads every queue of every group with our own ``RocketMQClient(namesrv=...)``,
   which routes each (broker, queue) to its broker.

It prints how many messages each broker group holds and stops the cluster.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from broker_core.cli_cluster import create_topic_everywhere
from broker_core.client import RocketMQClient
from broker_core.cluster.local import LocalCluster

TOPIC = "orders"
GROUP = "GID_cluster_example"
COUNT = 100


def produce(endpoint: str) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (TOPIC,))
    producer.startup()
    try:
        for i in range(COUNT):
            message = Message()
            message.topic, message.body = TOPIC, f"order {i}".encode()
            producer.send(message)
    finally:
        producer.shutdown()


def consume(endpoint: str, timeout_s: float = 60) -> int:
    consumer = SimpleConsumer(
        ClientConfiguration(endpoint, Credentials()), GROUP, {TOPIC: FilterExpression()}
    )
    consumer.startup()
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < COUNT and time.monotonic() < deadline:
            for message in consumer.receive(32, 15):
                seen.add(message.body)
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return len(seen)


def per_broker(namesrv: str) -> dict[str, int]:
    """Messages held by each broker group, read with our cluster client."""
    counts: dict[str, int] = {}
    with RocketMQClient(namesrv=namesrv) as client:
        for queue in client.query_route(TOPIC):
            low = client.query_offset(TOPIC, queue.queue_id, "BEGINNING", broker=queue.broker_name)
            high = client.query_offset(TOPIC, queue.queue_id, "END", broker=queue.broker_name)
            counts[queue.broker_name] = counts.get(queue.broker_name, 0) + high - low
    return counts


def run(directory: Path) -> dict[str, int]:
    cluster = LocalCluster(directory, register_interval_ms=1_000).start(2)
    try:
        for broker, _ in create_topic_everywhere(cluster.namesrv, None, TOPIC, queues=2):
            print(f"topic {TOPIC} created on {broker} at {cluster.endpoints[broker]}")
        one = next(iter(cluster.endpoints.values()))
        produce(one)
        received = consume(one)
        counts = per_broker(cluster.namesrv)
        print(f"received and acked {received} of {COUNT} through {one}")
        for broker, count in sorted(counts.items()):
            print(f"{broker} holds {count} message(s)")
        return counts
    finally:
        cluster.stop()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        counts = run(Path(tmp))
    return 0 if sum(counts.values()) == COUNT and len(counts) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
