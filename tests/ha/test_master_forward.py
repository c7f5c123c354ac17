"""A slave's forward of a send while its group changes master (issue 30, defect 3).

``forward_send`` is driven with the parts it reads of a slave's context; the master is a
real broker process, the old master a loopback port nobody listens on. The slave learns
of the new master only after asking a few times (as it does from etcd once the dead
master's lease expired and the election ran): the send must be held and forwarded, not
answered with PROXY_TIMEOUT at the first refused connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core.client import RocketMQClient
from broker_core.cluster.ports import free_port
from broker_core.config import Role
from broker_core.errors import BrokerNotReachableError, NotMasterError
from broker_core.server import master_forward
from broker_core.server.launcher import BrokerProcess
from tests.server.conftest import start_broker

TOPIC = "held"


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("master"))
    with RocketMQClient(proc.endpoint) as client:
        client.create_topic(TOPIC, queues=1)
    yield proc
    proc.stop()


@dataclass
class Slave:
    """What ``forward_send`` reads of a slave: its endpoint, name, role and the master it
    knows, which answers ``masters`` in turn (the last one from then on)."""

    masters: list[str]
    role: Role = Role.SLAVE
    asked: int = 0
    endpoint: str = "127.0.0.1:1"
    broker_name: str = "g"
    broker: Any = field(init=False)

    def __post_init__(self) -> None:
        self.broker = SimpleNamespace(replication=self)

    def master_endpoint(self) -> str:
        self.asked += 1
        return self.masters[min(self.asked, len(self.masters)) - 1]


class Call:
    """The servicer context of a client call: its metadata and deadline."""

    def __init__(self, metadata: list[tuple[str, str]] | None = None, remaining_s: float = 10):
        self._metadata = metadata or [("x-mq-client-id", "held")]
        self._remaining_s = remaining_s

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def time_remaining(self) -> float:
        return self._remaining_s


def _request(body: bytes) -> service_pb2.SendMessageRequest:
    message = pb.Message(
        topic=pb.Resource(name=TOPIC),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=f"HELD{body.hex()}", message_type=pb.MessageType.NORMAL
        ),
    )
    return service_pb2.SendMessageRequest(messages=[message])


def test_a_send_is_held_until_the_new_master_answers(master: BrokerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    slave = Slave(["", dead, dead, dead, master.endpoint])
    answer = master_forward.forward_send(slave, _request(b"one"), Call())  # type: ignore[arg-type]
    assert answer is not None and answer.status.code == pb.Code.OK, answer
    assert slave.asked == 5
    with RocketMQClient(master.endpoint) as client:
        client.create_group("GID_held")
        assert b"one" in [m.body for m in client.pull("GID_held", TOPIC, 0, 0, 10).messages]


def test_a_slave_elected_meanwhile_stores_the_send_itself() -> None:
    slave = Slave([f"127.0.0.1:{free_port()}", ""])

    def elected() -> str:
        slave.role = Role.SLAVE if slave.asked < 3 else Role.MASTER
        return Slave.master_endpoint(slave)

    slave.master_endpoint = elected  # type: ignore[method-assign]
    assert master_forward.forward_send(slave, _request(b"two"), Call()) is None  # type: ignore[arg-type]


def test_no_master_within_the_callers_deadline_is_a_retriable_error() -> None:
    slave = Slave([""])
    with pytest.raises(BrokerNotReachableError, match="none known"):
        master_forward.forward_send(slave, _request(b"three"), Call(remaining_s=0.6))  # type: ignore[arg-type]


def test_a_forwarded_send_is_not_forwarded_again(master: BrokerProcess) -> None:
    slave = Slave([master.endpoint])
    call = Call([(master_forward.FORWARDED_BY, "127.0.0.1:2")])
    with pytest.raises(NotMasterError):
        master_forward.forward_send(slave, _request(b"four"), call)  # type: ignore[arg-type]


def test_the_hold_is_bounded_by_the_callers_deadline() -> None:
    assert master_forward._hold_s(Call(remaining_s=3.0)) == pytest.approx(2.5)  # type: ignore[arg-type]
    assert master_forward._hold_s(Call(remaining_s=60.0)) == master_forward.FORWARD_HOLD_S  # type: ignore[arg-type]
