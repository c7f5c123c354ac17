"""Orderly pull under the broker's queue locks (LockQueues / UnlockQueues), real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker_core.client import OrderlyPuller, RocketMQClient
from broker_core.errors import InvalidArgumentError, QueueLockedError, TopicNotFoundError
from tests.server.conftest import BrokerProcess

TOPIC, GROUP = "ordered", "GID_ordered"


@pytest.fixture(scope="module")
def filled(client: RocketMQClient) -> list[bytes]:
    client.create_topic(TOPIC, queues=2)
    client.create_group(GROUP, consume_from_where="first_offset")
    bodies = [f"m{i}".encode() for i in range(10)]
    for body in bodies:
        client.send_batch(TOPIC, [body])
    return bodies


@pytest.fixture
def pair(broker: BrokerProcess) -> Iterator[tuple[OrderlyPuller, OrderlyPuller]]:
    """Two clients (distinct client ids) of one group, each with a puller."""
    with (
        RocketMQClient(broker.endpoint, client_id="orderly-a") as a,
        RocketMQClient(broker.endpoint, client_id="orderly-b") as b,
    ):
        first, second = OrderlyPuller(a, GROUP, TOPIC), OrderlyPuller(b, GROUP, TOPIC)
        yield first, second
        first.close()
        second.close()


def offsets(batch) -> list[int]:
    return [m.queue_offset for m in batch.messages]


def test_one_client_at_a_time_reads_a_queue_in_order(filled, pair) -> None:
    first, second = pair
    batch = first.pull(0, 2)
    assert offsets(batch) == [0, 1]
    with pytest.raises(QueueLockedError, match="locked by another client"):
        second.pull(0, 2)
    with pytest.raises(QueueLockedError):
        second.commit(0, 5)  # never over the holder's progress
    assert second.lock([0, 1]) == {1}  # the free queue only
    first.commit(0, batch.next_offset)
    assert offsets(first.pull(0, 2)) == [2, 3]  # continues from its own position
    assert first.close() == {0}
    rest = second.pull(0, 32)  # gained: starts at the committed offset, not at 4
    assert offsets(rest)[0] == 2 and offsets(rest) == sorted(offsets(rest))


def test_unlock_leaves_another_clients_lock(client, filled, pair) -> None:
    first, _second = pair
    first.lock([1])
    assert client.unlock_queues(GROUP, TOPIC, [1], client_id="someone-else") == set()
    assert client.lock_queues(GROUP, TOPIC, [1], client_id="someone-else") == set()
    assert first.close() == {1}
    assert client.lock_queues(GROUP, TOPIC, [1], client_id="someone-else") == {1}
    assert client.unlock_queues(GROUP, TOPIC, [1], client_id="someone-else") == {1}


@pytest.mark.parametrize(
    ("topic", "queue_ids", "error", "match"),
    [
        ("no-such-topic", [0], TopicNotFoundError, "no-such-topic"),
        (TOPIC, [7], InvalidArgumentError, r"no read queue\(s\) \[7\]"),
        (TOPIC, ["0"], InvalidArgumentError, "list of integers"),
    ],
)
def test_bad_lock_requests_are_refused(client, filled, topic, queue_ids, error, match) -> None:
    with pytest.raises(error, match=match):
        client.lock_queues(GROUP, topic, queue_ids, client_id="c1")


def test_an_empty_client_id_is_refused(client, filled) -> None:
    with pytest.raises(InvalidArgumentError, match="client_id"):
        client.lock_queues(GROUP, TOPIC, [0], client_id=" ")


def test_a_lock_older_than_the_expiry_rereads_the_committed_offset(broker, filled) -> None:
    now = [0.0]
    with RocketMQClient(broker.endpoint, client_id="orderly-c") as c:
        puller = OrderlyPuller(
            c, "GID_ordered_c", TOPIC, refresh_s=1, expiry_s=2, clock_s=lambda: now[0]
        )
        c.create_group("GID_ordered_c", consume_from_where="first_offset")
        assert offsets(puller.pull(1, 2)) == [0, 1]
        now[0] = 1.5  # refreshed, still the same position
        assert offsets(puller.pull(1, 2)) == [2, 3]
        now[0] = 5.0  # the lock may have moved meanwhile: start over from the commit
        assert offsets(puller.pull(1, 2)) == [0, 1]
        assert puller.close() == {1}


def test_refresh_must_come_before_expiry(client) -> None:
    with pytest.raises(InvalidArgumentError, match="refresh_s < expiry_s"):
        OrderlyPuller(client, GROUP, TOPIC, refresh_s=60, expiry_s=60)
