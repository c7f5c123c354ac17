"""Idempotent sends through the remoting front end (4.x clients): SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE repeated with the same UNIQ_KEYs — as a 4.x producer retries, on
another queue — are stored once and answered with the original queue, offset and id."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.protocol.property_codec import encode_text
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from tests.remoting_records import encode_batch
from tests.store.conftest import small_config


@pytest.fixture
def end(tmp_path: Path) -> Iterator[tuple[Broker, RemotingClient]]:
    broker = Broker(BrokerConfig(default_queue_nums=4), small_config(tmp_path))
    broker.start()
    front = RemotingFrontEnd(broker, "127.0.0.1:0")
    front.start()
    client = RemotingClient(front.address, 5.0)
    yield broker, client
    client.close()
    front.stop()
    broker.stop()


def call(client: RemotingClient, code: int, fields: dict[str, str], body: bytes) -> dict[str, str]:
    resp = client.invoke(RemotingCommand.request(code, fields, body), 5.0)
    assert resp.code == 0, resp.remark
    return {k: resp.ext_fields[k] for k in ("msgId", "queueId", "queueOffset")}


def fields(topic: str, queue_id: int, props: str = "") -> dict[str, str]:
    now = str(int(time.time() * 1000))
    return {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0"} | {
        "g": now,
        "h": "0",
        "i": props,
        "j": "0",
        "k": "false",
    }


def total(broker: Broker, topic: str) -> int:
    broker.store.wait_dispatched()
    return sum(high - low for _q, low, high in broker.topic_status(topic))


def test_send_message_v2_retried_on_another_queue_is_stored_once(
    end: tuple[Broker, RemotingClient],
) -> None:
    broker, client = end
    props = encode_text({"UNIQ_KEY": "V2-1", "TAGS": "a"})
    first = call(client, RC.SEND_MESSAGE_V2, fields("r2", 1, props), b"body")
    call(client, RC.SEND_MESSAGE_V2, fields("r2", 2, encode_text({"UNIQ_KEY": "V2-2"})), b"x")
    again = call(client, RC.SEND_MESSAGE_V2, fields("r2", 3, props), b"body")
    assert again == first and first["queueId"] == "1"
    assert total(broker, "r2") == 2


def test_a_batch_resent_is_stored_once(end: tuple[Broker, RemotingClient]) -> None:
    broker, client = end
    items = [(0, b"b%d" % i, {"UNIQ_KEY": f"RB-{i}", "KEYS": f"k{i}"}) for i in range(6)]
    first = call(client, RC.SEND_BATCH_MESSAGE, fields("rb", 0), encode_batch(items))
    again = call(client, RC.SEND_BATCH_MESSAGE, fields("rb", 2), encode_batch(items))
    assert again == first and first["queueId"] == "0"
    more = call(
        client,
        RC.SEND_BATCH_MESSAGE,
        fields("rb", 0),
        encode_batch([*items[4:], (0, b"new", {"UNIQ_KEY": "RB-NEW"})]),
    )
    assert more["msgId"] == "RB-4,RB-5,RB-NEW" and more["queueOffset"] == "4"
    assert total(broker, "rb") == 7
