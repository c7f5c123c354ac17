"""An in-process Broker behind a RemotingFrontEnd on a free loopback port, and helpers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.remoting.channel import Channel
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from tests.store.conftest import small_config


@pytest.fixture
def front(tmp_path: Path) -> Iterator[RemotingFrontEnd]:
    broker = Broker(BrokerConfig(default_queue_nums=2), small_config(tmp_path / "store"))
    broker.start()
    end = RemotingFrontEnd(broker, "127.0.0.1:0")
    end.start()
    yield end
    end.stop()
    broker.stop()


class PushRecorder:
    """A client's ``on_request``: records what the broker pushes, answers nothing."""

    def __init__(self) -> None:
        self.pushed: list[RemotingCommand] = []
        self.event = threading.Event()

    def __call__(self, channel: Channel, req: RemotingCommand) -> RemotingCommand | None:
        self.pushed.append(req)
        self.event.set()
        return None


@pytest.fixture
def clients(front: RemotingFrontEnd) -> Iterator[list[RemotingClient]]:
    made: list[RemotingClient] = []
    yield made
    for c in made:
        c.close()


def connect(
    front: RemotingFrontEnd, made: list[RemotingClient], recorder: PushRecorder | None = None
) -> RemotingClient:
    client = RemotingClient(front.address, 5.0, on_request=recorder)
    made.append(client)
    return client


def call(
    client: RemotingClient,
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes = b"",
    timeout_s: float = 5.0,
) -> RemotingCommand:
    return client.invoke(RemotingCommand.request(code, fields or {}, body), timeout_s)


def heartbeat_body(client_id: str, group: str, topic: str, expression: str = "*") -> bytes:
    return json.dumps(
        {
            "clientID": client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "messageModel": "CLUSTERING",
                    "consumeType": "CONSUME_PASSIVELY",
                    "subscriptionDataSet": [{"topic": topic, "subString": expression}],
                }
            ],
        }
    ).encode()
