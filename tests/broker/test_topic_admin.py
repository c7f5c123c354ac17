"""``topic_admin``'s rules on a real broker and store: what administrators may change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.topics import Perm, TopicConfig
from broker_core.config import BrokerConfig
from broker_core.errors import ConflictError, InvalidTopicError
from broker_core.message import Message
from tests.store.conftest import small_config


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(default_queue_nums=2), small_config(tmp_path / "store"))
    b.start()
    yield b
    b.stop()


def test_an_existing_dead_letter_topic_may_be_opened_for_reading(broker: Broker) -> None:
    """As RocketMQ's updateTopic allows: admins set perm 6 on a DLQ to drain it."""
    dlq = broker.topics.ensure_dlq_topic("GID_dead")
    change = broker.administer_topic(TopicConfig(dlq.name, 1, 1, perm=Perm.WRITE), update=True)
    assert change.changed and broker.topics.require(dlq.name).perm == Perm.WRITE
    with pytest.raises(InvalidTopicError, match="dead-letter"):
        broker.administer_topic(TopicConfig("%DLQ%GID_other", 1, 1))


def test_hidden_messages_are_counted_per_hidden_queue(broker: Broker) -> None:
    broker.administer_topic(TopicConfig("t", 3, 3))
    broker.sending.send([Message("t", b"x", queue_id=q) for q in (0, 1, 2, 2)])
    broker.store.wait_dispatched()
    with pytest.raises(ConflictError, match=r"hides queues 1\.\.2 holding 3 message"):
        broker.administer_topic(TopicConfig("t", 1, 3), update=True)
    change = broker.administer_topic(TopicConfig("t", 1, 3), update=True, force=True)
    assert change.hidden_messages == 3 and broker.topics.require("t").read_queue_nums == 1


def test_same_settings_are_idempotent_and_write_nothing(broker: Broker) -> None:
    broker.administer_topic(TopicConfig("same", 2, 2))
    change = broker.administer_topic(TopicConfig("same", 2, 2))
    assert (change.created, change.changed) == (False, False)
