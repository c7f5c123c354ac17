"""Transactions over remoting: prepared sends, END_TRANSACTION (37), and the broker's
CHECK_TRANSACTION_STATE (39) pushed to a producer that heartbeats for the group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.message import decode_offset_message_id
from broker_core.protocol.property_codec import encode_text
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from tests.remoting_broker.conftest import PushRecorder, call, connect
from tests.remoting_records import decode_stored
from tests.store.conftest import small_config


@pytest.fixture
def front(tmp_path: Path) -> Iterator[RemotingFrontEnd]:
    config = BrokerConfig(
        default_queue_nums=1, transaction_check_timeout_ms=300, transaction_check_interval_ms=100
    )
    broker = Broker(config, small_config(tmp_path / "store"))
    broker.start()
    end = RemotingFrontEnd(broker, "127.0.0.1:0")
    end.start()
    yield end
    end.stop()
    broker.stop()


def send_prepared(client, body: bytes) -> RemotingCommand:
    props = encode_text({"TRAN_MSG": "true", "PGROUP": "txg"})
    resp = call(
        client, RC.SEND_MESSAGE_V2, {"a": "txg", "b": "tt", "e": "0", "f": "4", "i": props}, body
    )
    assert resp.code == 0, resp.remark
    return resp


def java_end_fields(sent: RemotingCommand) -> dict[str, str]:
    """What the Java producer puts in END_TRANSACTION after a half send: its UNIQ_KEY (here
    the broker's, answered as the transaction id) and the commitlog offset decoded from the
    answered ``msgId`` (RocketMQ's offset message id of the half record)."""
    _, physical_offset = decode_offset_message_id(sent.ext_fields["msgId"])
    return {
        "msgId": sent.ext_fields["transactionId"],
        "transactionId": sent.ext_fields["transactionId"],
        "commitLogOffset": str(physical_offset),
    }


def end(client, resp_or_fields: dict[str, str], kind: int, from_check: bool = False) -> None:
    fields = {
        "producerGroup": "txg",
        "commitOrRollback": str(kind),
        "fromTransactionCheck": str(from_check).lower(),
        **resp_or_fields,
    }
    assert call(client, RC.END_TRANSACTION, fields).code == 0


def visible(client) -> list[bytes]:
    got = call(
        client,
        RC.PULL_MESSAGE,
        {
            "consumerGroup": "txc",
            "topic": "tt",
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "0",
        },
    )
    return [r["body"] for r in decode_stored(got.body)] if got.code == ResponseCode.SUCCESS else []


def test_commit_rollback_and_check_back(front: RemotingFrontEnd, clients) -> None:
    pushes = PushRecorder()
    producer = connect(front, clients, pushes)
    call(
        producer,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "tt", "readQueueNums": "1", "writeQueueNums": "1"},
    )
    body = json.dumps(
        {"clientID": "tx-client", "producerDataSet": [{"groupName": "txg"}], "consumerDataSet": []}
    ).encode()
    assert call(producer, RC.HEART_BEAT, body=body).code == 0
    first = send_prepared(producer, b"committed")
    assert visible(producer) == []  # a half message is invisible
    end(producer, java_end_fields(first), 8)
    assert visible(producer) == [b"committed"]
    rolled = send_prepared(producer, b"rolled-back")
    end(producer, java_end_fields(rolled), 12)
    pushes.event.clear()
    pushes.pushed.clear()
    unresolved = send_prepared(producer, b"checked")
    assert pushes.event.wait(10)  # the broker asks the producer after the check timeout
    check = pushes.pushed[0]
    assert check.code == RC.CHECK_TRANSACTION_STATE and check.is_oneway
    assert check.ext_fields["msgId"] == unresolved.ext_fields["transactionId"]
    assert check.ext_fields["transactionId"] == unresolved.ext_fields["transactionId"]
    record = decode_stored(check.body)[0]
    assert record["topic"] == "tt" and record["body"] == b"checked"
    end(
        producer,
        {"msgId": check.ext_fields["msgId"], "transactionId": check.ext_fields["transactionId"]},
        8,
        from_check=True,
    )
    assert visible(producer) == [b"committed", b"checked"]


def test_check_back_reaches_a_producer_that_has_not_heartbeat_yet(
    front: RemotingFrontEnd, clients
) -> None:
    """A 4.x producer heartbeats when its timer fires (1 s after start, then every 30 s):
    one whose first send came after that tick is unknown for up to 30 s. Its UNKNOW half
    is still checked back, on the connection it came on (before, every check in that
    window asked nobody and counted, and the half was rolled back after the maximum)."""
    pushes = PushRecorder()
    producer = connect(front, clients, pushes)
    call(
        producer,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": "tt", "readQueueNums": "1", "writeQueueNums": "1"},
    )
    unresolved = send_prepared(producer, b"no-heartbeat")  # no HEART_BEAT at all
    assert pushes.event.wait(10)
    check = pushes.pushed[0]
    assert check.code == RC.CHECK_TRANSACTION_STATE
    assert check.ext_fields["transactionId"] == unresolved.ext_fields["transactionId"]
    end(producer, {k: check.ext_fields[k] for k in ("msgId", "transactionId")}, 8, True)
    assert visible(producer) == [b"no-heartbeat"]


def test_a_closed_half_sender_is_not_asked(front: RemotingFrontEnd, clients) -> None:
    """The connection a half came on is forgotten when it closes; a producer of the group
    that connects later (heartbeat) is asked instead."""
    gone = connect(front, clients)
    call(gone, RC.UPDATE_AND_CREATE_TOPIC, {"topic": "tt", "readQueueNums": "1"})
    unresolved = send_prepared(gone, b"orphan")
    gone.close()
    pushes = PushRecorder()
    later = connect(front, clients, pushes)
    body = json.dumps(
        {"clientID": "tx-later", "producerDataSet": [{"groupName": "txg"}], "consumerDataSet": []}
    ).encode()
    assert call(later, RC.HEART_BEAT, body=body).code == 0
    assert pushes.event.wait(10)
    assert pushes.pushed[0].ext_fields["transactionId"] == unresolved.ext_fields["transactionId"]


def test_grpc_streams_attaching_keep_the_remoting_check_back(tmp_path: Path) -> None:
    """The gRPC front end installs its checker when it starts and (before) again on every
    Telemetry stream; the second install replaced the remoting front end's chain, so once
    any 5.x client had connected, a 4.x producer's UNKNOW half was never checked back."""
    from broker_core.server import sessions
    from broker_core.server.context import ServerContext

    config = BrokerConfig(
        default_queue_nums=1, transaction_check_timeout_ms=300, transaction_check_interval_ms=100
    )
    broker = Broker(config, small_config(tmp_path / "store"))
    broker.start()
    ctx = ServerContext(broker, "127.0.0.1:1", "broker-a")
    sessions.install_transaction_checker(ctx)  # the gRPC app, at its start
    front = RemotingFrontEnd(broker, "127.0.0.1:0")  # chains itself in front
    front.start()
    made: list[Any] = []
    try:
        sessions.install_transaction_checker(ctx)  # what a Telemetry stream's attach does
        pushes = PushRecorder()
        producer = connect(front, made, pushes)
        call(producer, RC.UPDATE_AND_CREATE_TOPIC, {"topic": "tt", "readQueueNums": "1"})
        unresolved = send_prepared(producer, b"after-grpc")
        assert pushes.event.wait(10)
        check = pushes.pushed[0]
        assert check.ext_fields["transactionId"] == unresolved.ext_fields["transactionId"]
    finally:
        for client in made:
            client.close()
        front.stop()
        broker.stop()
