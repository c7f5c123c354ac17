"""mqadmin-like verbs against a real broker process (issue 30): ``rmq group delete``,
``rmq broker config get|set``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker
from tests.server.test_simple_consumer import ack, receive, received, split_stream
from tests.test_cli import fails, ok, rmq


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("verbs"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def test_group_delete_forgets_config_and_offsets(broker) -> None:
    ok(rmq(broker, "topic", "create", "verbs_orders", "--queues", "1"))
    ok(rmq(broker, "group", "create", "verbs_g", "--max-retries", "3"))
    ok(rmq(broker, "send", "verbs_orders", "one"))
    ok(rmq(broker, "consume", "verbs_orders", "--group", "verbs_g", "--from", "earliest"))
    with RocketMQClient(broker.endpoint) as client:
        assert client.get_offset("verbs_g", "verbs_orders", 0) == 1
        assert json.loads(ok(rmq(broker, "group", "delete", "verbs_g", "--json"))) == {
            "deleted": "verbs_g",
            "brokers": [broker.endpoint],
        }
        names = [g["name"] for g in json.loads(ok(rmq(broker, "group", "list", "--json")))]
        assert "verbs_g" not in names
        fails(rmq(broker, "group", "progress", "verbs_g"), "verbs_g")
        assert client.get_offset("verbs_g", "verbs_orders", 0) != 1  # the offset is gone
    fails(rmq(broker, "group", "delete", "verbs_g"), "verbs_g", "does not exist")


def test_group_delete_of_an_offsets_only_group(broker) -> None:
    ok(rmq(broker, "topic", "create", "verbs_plain", "--queues", "1"))
    with RocketMQClient(broker.endpoint) as client:
        client.update_offset("verbs_offsets_only", "verbs_plain", 0, 0)
    assert "group verbs_offsets_only deleted" in ok(
        rmq(broker, "group", "delete", "verbs_offsets_only")
    )


@pytest.mark.parametrize("name", ["CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_SCHEDULE"])
def test_the_brokers_own_groups_cannot_be_deleted(broker, name) -> None:
    fails(rmq(broker, "group", "delete", name), name, "broker's own")


# ---- broker config get / set --------------------------------------------------------------


def test_broker_config_get_shows_settings_and_live_keys(broker) -> None:
    answer = json.loads(ok(rmq(broker, "broker", "config", "get", "--json")))
    assert answer["config"]["max_long_polling_ms"] == 30_000
    assert set(answer["live_keys"]) == {
        "auto_create_topics",
        "auto_create_groups",
        "max_long_polling_ms",
        "trace_broker",
        "dedup_window_ms",
    }
    assert "max_long_polling_ms *" in ok(rmq(broker, "broker", "config", "get"))


def test_broker_config_set_changes_a_live_key_and_the_broker_obeys(broker) -> None:
    ok(rmq(broker, "send", "verbs_auto_on", "x"))  # auto-create is on by default
    out = ok(rmq(broker, "broker", "config", "set", "auto_create_topics", "false"))
    assert "auto_create_topics True -> False" in out
    try:
        fails(rmq(broker, "send", "verbs_auto_off", "x"), "verbs_auto_off", "auto-create is off")
        answer = json.loads(ok(rmq(broker, "broker", "config", "get", "--json")))
        assert answer["config"]["auto_create_topics"] is False
    finally:
        ok(rmq(broker, "broker", "config", "set", "auto_create_topics", "true"))
    ok(rmq(broker, "send", "verbs_auto_off", "x"))


def test_broker_config_set_turns_the_brokers_own_trace_on_and_off(broker) -> None:
    """``trace_broker`` changes live: a send while on gets its Stored record, one while
    off none (checked once a later send's record is written: the broker writes its
    records in the order it took them)."""

    def stored_events(msg_id: str) -> list[dict]:
        answer = json.loads(ok(rmq(broker, "message", "trace", msg_id, "--json")))
        return [e for e in answer["events"] if e["type"] == "Stored"]

    def awaited(msg_id: str) -> dict:
        deadline = time.monotonic() + 20
        while not (events := stored_events(msg_id)):
            assert time.monotonic() < deadline, f"no Stored record of {msg_id}"
            time.sleep(0.1)
        [event] = events
        return event

    def sent_id(body: str) -> str:
        out = ok(rmq(broker, "send", "verbs_live_trace", body))
        return out.split("message id: ", 1)[1].split()[0]

    def trace(setting: str) -> str:
        return ok(rmq(broker, "broker", "config", "set", "trace_broker", setting))

    untraced = sent_id("before")
    assert "trace_broker off -> all" in trace("all")
    try:
        event = awaited(sent_id("traced"))
        assert event["topic"] == "verbs_live_trace" and event["source"] == "broker"
        assert stored_events(untraced) == []  # sent while off: nothing was taken
        trace("off")
        after = sent_id("after")
        trace("0.5")  # a ratio: the probe below is sampled or not by its id
        trace("all")
        awaited(sent_id("probe"))
        assert stored_events(after) == []
    finally:
        trace("off")
    fails(rmq(broker, "broker", "config", "set", "trace_broker", "lots"), "trace_broker must be")


def test_broker_config_set_of_a_fixed_key_names_the_live_ones(broker) -> None:
    fails(
        rmq(broker, "broker", "config", "set", "default_queue_nums", "4"),
        "default_queue_nums",
        "auto_create_topics, auto_create_groups, max_long_polling_ms, trace_broker",
    )
    fails(rmq(broker, "broker", "config", "set", "max_long_polling_ms", "soon"), "milliseconds")
    fails(rmq(broker, "broker", "config", "set", "auto_create_groups", "maybe"), "true or false")


def test_broker_config_file_checker_still_works() -> None:
    assert "max_long_polling_ms" in ok(rmq(None, "broker", "config", "--defaults"))
    fails(rmq(None, "broker", "config", "--defaults", "get"), "get/set")


# ---- message resend -----------------------------------------------------------------------


def test_message_resend_reaches_that_group_only_as_a_new_message_of_its_topic(broker) -> None:
    """mqadmin consumeMessageDirectly: the copy is delivered to --group's consumer as a
    message of the original topic, under a new id naming the original, and no other group
    sees it; the original is not moved."""
    ok(rmq(broker, "topic", "create", "verbs_resend", "--queues", "1"))
    for group in ("verbs_target", "verbs_other"):
        ok(rmq(broker, "group", "create", group, "--consume-from", "first_offset"))
    sent = ok(rmq(broker, "send", "verbs_resend", "again please"))
    original = sent.split("message id: ")[1].split()[0]
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for group in ("verbs_target", "verbs_other"):  # both consume the original first
            [m] = received(stub, "verbs_resend", group)
            assert m.system_properties.message_id == original
            assert ack(stub, "verbs_resend", group, m).status.code == pb.Code.OK
        answer = ok(
            rmq(
                broker,
                "message",
                "resend",
                original,
                "--topic",
                "verbs_resend",
                "--group",
                "verbs_target",
                "--json",
            )
        )
        copy = json.loads(answer)
        assert copy["topic"] == "%RETRY%verbs_target" and copy["message_id"] != original
        [again] = received(stub, "verbs_resend", "verbs_target", poll_ms=10_000)
        assert again.topic.name == "verbs_resend" and again.body == b"again please"
        assert again.system_properties.message_id == copy["message_id"]
        assert again.system_properties.delivery_attempt == 1
        assert split_stream(receive(stub, "verbs_resend", "verbs_other", poll_ms=1_000))[1] == []
    with RocketMQClient(broker.endpoint) as client:
        assert client.topic_status("verbs_resend")[0]["max_offset"] == 1  # original stays
    fails(
        rmq(
            broker,
            "message",
            "resend",
            "00000000000000000000000000000000",
            "--topic",
            "verbs_resend",
            "--group",
            "verbs_target",
        ),
        "00000000000000000000000000000000",
    )
