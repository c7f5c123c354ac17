"""Where a configured group without offsets starts, as RocketMQ decides it.

A group made before its first consumer (``rmq group create``, consume-from ``last_offset``)
must still get what was sent in between while the queue's first message is in memory
(RocketMQ's ``ConsumerManageProcessor`` for 4.x offset queries, POP's
``initPopOffsetByCheckMsgInMem``); otherwise a poison message sent before the consumer
started would never reach the dead-letter queue. Past the in-memory window ``last_offset``
starts at the end, and POP at the last message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.groups import GroupConfig
from broker_core.broker.retry import RetryPolicy
from broker_core.config import BrokerConfig
from broker_core.message import Message
from tests.store.conftest import small_config


def make_broker(store_dir: Path, **store: float) -> Broker:
    broker = Broker(BrokerConfig(default_queue_nums=1), small_config(store_dir, **store))
    broker.start()
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = make_broker(tmp_path / "store")
    yield b
    b.stop()


def send(broker: Broker, topic: str, *bodies: bytes) -> None:
    broker.sending.send([Message(topic, body, queue_id=0) for body in bodies])
    broker.store.wait_dispatched()


def receive(broker: Broker, group: str, topic: str) -> list[bytes]:
    return [
        p.message.body
        for p in broker.consuming.receive(group, topic, max_count=32, invisible_ms=60_000)
    ]


def test_a_group_made_before_its_consumer_gets_what_was_sent_in_between(broker: Broker) -> None:
    broker.groups.create_or_update(GroupConfig("billing"))  # consume-from last_offset
    send(broker, "orders", b"o1", b"o2")
    assert broker.consumer_groups.starts_in_memory("orders", 0)
    assert broker.consumer_groups.consumer_offset("billing", "orders", 0) == 0
    assert receive(broker, "billing", "orders") == [b"o1", b"o2"]


def test_a_poison_message_sent_before_the_first_consumer_reaches_the_dlq(broker: Broker) -> None:
    broker.groups.create_or_update(GroupConfig("payments", retry_policy=RetryPolicy.default(0)))
    send(broker, "charges", b"poison")
    [popped] = broker.consuming.receive("payments", "charges", max_count=1, invisible_ms=60_000)
    broker.consuming.forward_to_dead_letter("payments", "charges", popped.receipt_handle)
    broker.store.wait_dispatched()
    assert receive(broker, "dlq-reader", "%DLQ%payments") == [b"poison"]


def test_past_the_memory_window_last_offset_starts_at_the_end(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "store", access_message_in_memory_max_ratio=0.0)
    try:
        broker.groups.create_or_update(GroupConfig("late"))
        send(broker, "history", b"h1", b"h2", b"h3")
        assert not broker.consumer_groups.starts_in_memory("history", 0)
        assert (
            broker.consumer_groups.consumer_offset("late", "history", 0) == 3
        )  # a pull starts at the end
        assert receive(broker, "late", "history") == [b"h3"]  # POP pops the last one
        send(broker, "history", b"h4")
        assert receive(broker, "late", "history") == [b"h4"]
    finally:
        broker.stop()


def test_first_offset_and_auto_created_groups_are_unchanged(broker: Broker) -> None:
    send(broker, "audit", b"a1", b"a2")
    broker.groups.create_or_update(GroupConfig("first", consume_from_where="first_offset"))
    assert receive(broker, "first", "audit") == [b"a1", b"a2"]
    assert receive(broker, "auto", "audit") == [b"a1", b"a2"]
