"""``rmq topic create`` against a real broker: no silent updates, no silent shrinks, and
no changes to the topics the broker owns (issue 13, items 15 and 16)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from broker_core.client import RocketMQClient
from broker_core.errors import ConflictError, InvalidTopicError
from tests.broker.test_dedup_wire import proto, send_message
from tests.server.conftest import BrokerProcess, start_broker
from tests.test_cli import fails, ok, rmq


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("topic-admin"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def queues_of(broker: BrokerProcess, name: str) -> tuple[int, int]:
    listed = ok(rmq(broker, "topic", "list"))
    found = re.search(rf"{name}\s*│\s*(\d+)\s*│\s*(\d+)\s*│", listed)
    assert found, listed
    return int(found[1]), int(found[2])


def test_creating_an_existing_topic_with_other_settings_needs_update(broker) -> None:
    ok(rmq(broker, "topic", "create", "ta_same", "--queues", "4"))
    assert "unchanged" in ok(rmq(broker, "topic", "create", "ta_same", "--queues", "4"))
    fails(
        rmq(broker, "topic", "create", "ta_same", "--queues", "6"),
        "exists with other settings",
        "read_queue_nums 4 -> 6",
        "--update",
    )
    fails(rmq(broker, "topic", "create", "ta_same", "--type", "FIFO"), "message_type")
    assert queues_of(broker, "ta_same") == (4, 4)
    assert "updated: 6 read / 6 write" in ok(
        rmq(broker, "topic", "create", "ta_same", "--queues", "6", "--update")
    )


def test_shrinking_read_queues_needs_force_and_warns_what_it_hides(broker) -> None:
    ok(rmq(broker, "topic", "create", "ta_shrink", "--queues", "8"))
    with RocketMQClient(broker.endpoint) as client:
        for _ in range(16):  # round robin: two messages in each of the 8 queues
            client.send("ta_shrink", b"payload")
    line = fails(
        rmq(broker, "topic", "create", "ta_shrink", "--queues", "2", "--update"),
        "hides queues 2..7",
        "12 message(s)",
        "--force",
    )
    assert "ta_shrink" in line
    assert queues_of(broker, "ta_shrink") == (8, 8)
    fails(rmq(broker, "topic", "create", "ta_shrink", "--queues", "2"), "--update")
    # fewer write queues alone hides nothing (the safe way to drain): --update suffices
    assert "updated: 8 read / 2 write" in ok(
        rmq(broker, "topic", "create", "ta_shrink", "--write-queues", "2", "--update")
    )
    result = rmq(
        broker, "topic", "create", "ta_shrink", "--read-queues", "2", "--update", "--force"
    )
    assert "updated: 2 read / 2 write" in ok(result)
    assert "Warning:" in result.stderr and "12 message(s)" in result.stderr


def test_shrink_through_the_client_api_answers_the_hidden_count(broker) -> None:
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic("ta_api", queues=4)
        with pytest.raises(ConflictError, match="exists with other settings"):
            client.create_topic("ta_api", queues=3)
        with pytest.raises(ConflictError, match="force"):
            client.create_topic("ta_api", queues=3, update=True)
        answer = client.create_topic("ta_api", queues=3, update=True, force=True)
    assert (answer["read_queue_nums"], answer["hidden_messages"], answer["changed"]) == (3, 0, True)
    assert answer["warnings"] and "queues 3..3" in answer["warnings"][0]


@pytest.mark.parametrize(
    "name",
    [
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "rmq_sys_wheel_timer",
        "rmq_sys_REVIVE_LOG",
        "RMQ_SYS_NEW",
        "%RETRY%GID_ta",
    ],
)
def test_system_and_retry_topics_cannot_be_created_or_changed(broker, name) -> None:
    before = ok(rmq(broker, "topic", "list", "--all"))
    for extra in ([], ["--update"], ["--update", "--force"]):
        fails(
            rmq(broker, "topic", "create", name, "--queues", "1", *extra),
            name,
            "cannot be created or changed",
        )
    assert ok(rmq(broker, "topic", "list", "--all")) == before


def test_dead_letter_topic_is_not_created_by_hand(broker) -> None:
    fails(
        rmq(broker, "topic", "create", "%DLQ%GID_ta", "--queues", "1"),
        "dead-letter topic",
        "first dead letter",
    )
    with RocketMQClient(broker.endpoint) as client, pytest.raises(InvalidTopicError):
        client.create_topic("%DLQ%GID_ta")
    assert "%DLQ%GID_ta" not in ok(rmq(broker, "topic", "list", "--all"))


def test_creating_an_existing_group_with_other_settings_needs_update(broker) -> None:
    assert "created" in ok(rmq(broker, "group", "create", "GID_ta", "--max-retries", "3"))
    assert "unchanged" in ok(rmq(broker, "group", "create", "GID_ta", "--max-retries", "3"))
    fails(
        rmq(broker, "group", "create", "GID_ta", "--fifo"),
        "exists with other settings",
        "fifo False -> True",
        "--update",
    )
    assert "updated" in ok(rmq(broker, "group", "create", "GID_ta", "--fifo", "--update"))


@pytest.mark.parametrize(
    "name", ["CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_SCHEDULE", "CID_RMQ_SYS_POP_REVIVE"]
)
def test_the_brokers_own_groups_cannot_be_created_or_changed(broker, name) -> None:
    fails(
        rmq(broker, "group", "create", name, "--max-retries", "1", "--update"),
        name,
        "cannot be created or changed",
    )


def test_attributes_are_set_and_dedup_false_lets_repeats_through(broker) -> None:
    """``--attribute dedup=false``: the topic's repeated ids are stored each time; a bad
    value or form is refused with what is wrong."""
    ok(rmq(broker, "topic", "create", "ta_loose", "--queues", "1", "--attribute", "dedup=false"))
    ok(rmq(broker, "topic", "create", "ta_kept", "--queues", "1"))
    for topic in ("ta_loose", "ta_kept"):
        for _ in range(2):
            send_message(broker.endpoint, proto(topic, "TA-1"))
    with RocketMQClient(broker.endpoint) as client:
        assert client.topic_status("ta_loose")[0]["max_offset"] == 2
        assert client.topic_status("ta_kept")[0]["max_offset"] == 1
    fails(rmq(broker, "topic", "create", "ta_bad", "--attribute", "dedup=no"), "true or false")
    fails(rmq(broker, "topic", "create", "ta_bad", "--attribute", "dedup"), "KEY=VALUE")
