"""Producer RPCs against a real broker process with the official client: SendMessage,
RecallMessage, EndTransaction and the transaction check-back over Telemetry (raw protobuf
requests: ``test_producer_raw.py``).

What was stored is read back through the broker's admin service while it runs (QueryMessage
by id within the real topic), and, for the full field round trip, from the store directory
itself after the broker process stopped cleanly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.v5.exception import ClientException

from broker_core.config import StoreConfig
from broker_core.message import StoredMessage
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.server.admin_calls import admin_call, stored
from tests.server.conftest import DEFAULT_CONFIG, BrokerProcess, start_broker

Code = pb.Code


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    """Poll an external effect (a timer firing, a client callback) until a deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def message(topic: str, body: bytes, **fields: Any) -> Message:
    msg = Message()
    msg.topic, msg.body = topic, body
    for name, value in fields.items():
        if name == "properties":
            for key, prop in value.items():
                msg.add_property(key, prop)
        elif name == "keys":
            for key in value:
                msg.keys = key
        else:
            setattr(msg, name, value)
    return msg


class Checker(TransactionChecker):
    """Answers check-backs with ``resolution`` and records what it was asked."""

    def __init__(self, resolution: int = TransactionResolution.COMMIT) -> None:
        self.resolution = resolution
        self.asked: list[Message] = []
        self.called = threading.Event()

    def check(self, message: Message) -> int:
        self.asked.append(message)
        self.called.set()
        return self.resolution


@pytest.fixture
def producers(broker_process: BrokerProcess) -> Iterator[Any]:
    """``start(topics, checker=None)`` → a started official Producer, shut down afterwards."""
    started: list[Producer] = []

    def start(topics: list[str], checker: TransactionChecker | None = None) -> Producer:
        for topic in topics:  # an official client's route lookup never creates a topic
            admin_call(broker_process.endpoint, "CreateTopic", name=topic)
        config = ClientConfiguration(broker_process.endpoint, Credentials())
        producer = Producer(config, topics, checker)
        producer.startup()
        started.append(producer)
        return producer

    yield start
    for producer in started:
        producer.shutdown()


# ---- official client --------------------------------------------------------------------------


def test_round_trip_through_the_store(tmp_path) -> None:
    """Normal, FIFO and batched sends land in the store with every field the client set."""
    proc = start_broker(tmp_path)
    try:
        admin_call(proc.endpoint, "CreateTopic", name="rt")
        producer = Producer(ClientConfiguration(proc.endpoint, Credentials()), ["rt"])
        producer.startup()
        try:
            normal = message(
                "rt",
                b"hello",
                tag="TagA",
                keys=["k1", "k2"],
                properties={"color": "red", "size": "L"},
            )
            sent = {producer.send(normal).message_id: normal}
            for i in range(6):
                fifo = message("rt", f"order-{i}".encode(), message_group=f"g{i % 2}")
                sent[producer.send(fifo).message_id] = fifo
        finally:
            producer.shutdown()
    finally:
        assert proc.stop() == 0
    found = read_store(proc, "rt")
    assert set(found) == set(sent)
    first = found[next(iter(sent))]
    assert (first.body, first.tag, sorted(first.keys)) == (b"hello", "TagA", ["k1", "k2"])
    assert first.properties["color"] == "red" and first.properties["size"] == "L"
    assert first.born_timestamp_ms > 0 and first.born_host[0]
    for group in ("g0", "g1"):
        members = [m for m in found.values() if m.properties.get("__SHARDINGKEY") == group]
        assert len({m.queue_id for m in members}) == 1, f"group {group} spread over queues"
        ordered = sorted(members, key=lambda m: m.queue_offset)
        assert [m.body for m in ordered] == [
            f"order-{i}".encode() for i in range(6) if f"g{i % 2}" == group
        ]


def read_store(proc: BrokerProcess, topic: str) -> dict[str, StoredMessage]:
    """Open the stopped broker's store and read every message of ``topic`` by id."""
    config = StoreConfig(
        store_dir=str(proc.store_dir),
        segment_size_bytes=DEFAULT_CONFIG["store"]["segment_size_bytes"],
    )
    store = MessageStore(config)
    report = store.open()
    try:
        assert report is not None
        found: dict[str, StoredMessage] = {}
        for queue_id in range(4):
            high = store.max_offset(topic, queue_id)
            if high:
                for msg in store.get_messages(QueueRead(topic, queue_id, 0, high)).messages:
                    found[msg.message_id] = msg
        return found
    finally:
        store.close()


def test_send_answers_with_the_client_id_and_offset(broker_process, producers) -> None:
    producer = producers(["send-ok"])
    receipts = [producer.send(message("send-ok", b"x%d" % i, keys=[f"key-{i}"])) for i in range(3)]
    for i, receipt in enumerate(receipts):
        got = stored(broker_process.endpoint, receipt.message_id, "send-ok")
        assert got is not None and got["body"] == f"x{i}" and got["keys"] == [f"key-{i}"]
        assert got["queue_offset"] == receipt.offset


def test_delivery_timestamp_is_honoured(broker_process, producers) -> None:
    producer = producers(["delay"])
    due_ms = int(time.time() * 1000) + 2_000
    receipt = producer.send(message("delay", b"later", delivery_timestamp=due_ms))
    assert receipt.recall_handle
    assert stored(broker_process.endpoint, receipt.message_id, "delay") is None
    got = wait_for(
        lambda: stored(broker_process.endpoint, receipt.message_id, "delay"),
        15,
        "the timed message",
    )
    assert time.time() * 1000 >= due_ms and got["store_timestamp_ms"] >= due_ms
    assert got["body"] == "later"


def test_recalled_message_is_never_delivered(broker_process, producers) -> None:
    producer = producers(["recall"])
    due_ms = int(time.time() * 1000) + 1_500
    recalled = producer.send(message("recall", b"cancelled", delivery_timestamp=due_ms))
    witness = producer.send(message("recall", b"witness", delivery_timestamp=due_ms))
    assert producer.recall_message("recall", recalled.recall_handle) == recalled.message_id
    assert producer.recall_message("recall", recalled.recall_handle) == recalled.message_id
    wait_for(
        lambda: stored(broker_process.endpoint, witness.message_id, "recall"),
        15,
        "the witness timed message",
    )
    assert stored(broker_process.endpoint, recalled.message_id, "recall") is None
    with pytest.raises(ClientException) as too_late:
        producer.recall_message("recall", witness.recall_handle)
    assert too_late.value.code == Code.NOT_FOUND


def test_transaction_commit_and_rollback(broker_process, producers) -> None:
    producer = producers(["tx"], Checker(TransactionResolution.ROLLBACK))
    committed_tx = producer.begin_transaction()
    committed = producer.send(message("tx", b"commit me"), committed_tx)
    rolled_back_tx = producer.begin_transaction()
    rolled_back = producer.send(message("tx", b"roll me back"), rolled_back_tx)
    assert committed.transaction_id and rolled_back.transaction_id
    assert stored(broker_process.endpoint, committed.message_id, "tx") is None
    committed_tx.commit()
    rolled_back_tx.rollback()
    got = stored(broker_process.endpoint, committed.message_id, "tx")
    assert got is not None and got["body"] == "commit me"
    assert stored(broker_process.endpoint, rolled_back.message_id, "tx") is None
    with pytest.raises(ClientException):
        rolled_back_tx.commit()  # already ended: the broker refuses
    assert stored(broker_process.endpoint, rolled_back.message_id, "tx") is None


def test_unresolved_transaction_is_checked_back(broker_process, producers) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    producer = producers(["tx-check"], checker)
    transaction = producer.begin_transaction()
    half = message("tx-check", b"forgotten", tag="T", keys=["order-7"], properties={"region": "eu"})
    receipt = producer.send(half, transaction)
    assert checker.called.wait(15), "the broker never asked the producer"
    asked = checker.asked[0]
    assert (asked.message_id, asked.topic, asked.body) == (
        receipt.message_id,
        "tx-check",
        b"forgotten",
    )
    assert asked.tag == "T" and asked.keys == {"order-7"} and asked.properties == {"region": "eu"}
    assert not asked.corrupted
    got = wait_for(
        lambda: stored(broker_process.endpoint, receipt.message_id, "tx-check"),
        15,
        "the checked transaction to be committed",
    )
    assert got["body"] == "forgotten" and got["properties"]["region"] == "eu"


def test_check_back_reaches_a_producer_that_named_no_topics(broker_process, producers) -> None:
    checker = Checker(TransactionResolution.ROLLBACK)
    admin_call(broker_process.endpoint, "CreateTopic", name="tx-late")
    producer = producers([], checker)  # learns of the topic only when it sends
    receipt = producer.send(message("tx-late", b"undecided"), producer.begin_transaction())
    assert checker.called.wait(15), "the broker never asked the producer"
    assert checker.asked[0].message_id == receipt.message_id
    assert stored(broker_process.endpoint, receipt.message_id, "tx-late") is None
