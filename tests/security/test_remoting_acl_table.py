"""Every request code of ``remoting_broker/access.py``, allowed and refused, from one table.

Each row sends one request to a real broker's remoting port twice: signed by a user whose
rules grant exactly what the code needs (the answer is not NO_PERMISSION: the request got
past the guard, whatever the handler then says) and by a user who lacks it (NO_PERMISSION
naming the missing right). The table must name every code ``access.py`` knows, which
must be every code the remoting front end handles (a handled code without a rule would
be for super users only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.access import NEEDS
from broker_core.remoting_broker.access_offsets import OFFSET_NEEDS
from broker_core.remoting_broker.frontend import HANDLERS
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.security.test_remoting_acl import _invoke, _offset_of, _prepare, _send
from tests.server.conftest import BrokerProcess

C = RequestCode
ADMIN = (ADMIN_KEY, ADMIN_SECRET)
USERS: dict[str, list[tuple[str, list[str]]]] = {  # user -> [(resource, actions)]
    "alice": [("Topic:orders", ["Pub"])],
    "erin": [("Topic:orders", ["Sub"]), ("Group:GID_erin", ["Sub"])],
    "gina": [("Topic:orders", ["Get"]), ("Group:GID_erin", ["Get"])],
    "uma": [("Topic:orders", ["Update"]), ("Group:GID_erin", ["Update"])],
    "carl": [("Topic:made-by-carl", ["Create"])],
    "lee": [("Topic:*", ["List"])],
    "vic": [("Topic:*", ["Get"])],
    "nobody": [],
}


def creds(user: str) -> tuple[str, str]:
    return (user, f"{user}-secret")


@dataclass(frozen=True)
class Row:
    code: int
    allowed: str  # a user with exactly the right
    refused: str | None  # a user without it (None: the request is refused unsigned)
    missing: str  # what the refusal names
    request: Callable[[str], RemotingCommand]  # addr -> the request


def _cmd(code: int, body: bytes | None = None, **fields: str) -> Callable[[str], RemotingCommand]:
    return lambda addr: RemotingCommand.request(code, fields, body or b"")


def _json(obj: object) -> bytes:
    return json.dumps(obj).encode()


V1_SEND = {"producerGroup": "pg", "topic": "orders", "queueId": "0", "sysFlag": "0"}
V1_SEND |= {"bornTimestamp": "0", "flag": "0", "properties": ""}
QUEUE = {"topic": "orders", "queueId": "0"}
EGROUP = {"consumerGroup": "GID_erin"}
HEARTBEAT = {
    "clientID": "c1",
    "producerDataSet": [],
    "consumerDataSet": [{"groupName": "GID_erin", "subscriptionDataSet": [{"topic": "orders"}]}],
}
MQ_SET = {"consumerGroup": "GID_erin", "clientId": "c1"}
MQ_SET |= {"mqSet": [{"topic": "orders", "brokerName": "b", "queueId": 0}]}


def _end_transaction(addr: str) -> RemotingCommand:
    half = _prepare(addr, creds("alice"), "orders", b"half for the table")
    header = {"producerGroup": "pg-tx", "commitOrRollback": "12", "fromTransactionCheck": "false"}
    return RemotingCommand.request(C.END_TRANSACTION, {**header, **half})  # 12: rollback


def _send_back(addr: str) -> RemotingCommand:
    body = b"table send-back"
    assert _invoke(addr, ADMIN, _send("orders", body)).code == ResponseCode.SUCCESS
    fields = {"group": "GID_erin", "offset": str(_offset_of(addr, "orders", body))}
    fields |= {"delayLevel": "0", "originTopic": "orders", "maxReconsumeTimes": "16"}
    return RemotingCommand.request(C.CONSUMER_SEND_MSG_BACK, fields)


SUB_OR_GET_ORDERS = "Sub or Get on Topic:orders"
TABLE = [
    Row(
        C.SEND_MESSAGE,
        "alice",
        "erin",
        "Pub on Topic:orders",
        _cmd(C.SEND_MESSAGE, b"x", **V1_SEND),
    ),
    Row(C.SEND_MESSAGE_V2, "alice", "erin", "Pub on Topic:orders", lambda a: _send("orders", b"x")),
    Row(
        C.SEND_BATCH_MESSAGE,
        "alice",
        "erin",
        "Pub on Topic:orders",
        _cmd(C.SEND_BATCH_MESSAGE, b"", a="pg", b="orders", e="0", i=""),
    ),
    Row(
        C.PULL_MESSAGE,
        "erin",
        "alice",
        "Sub on Topic:orders",
        _cmd(C.PULL_MESSAGE, **QUEUE, **EGROUP, queueOffset="0", maxMsgNums="1", sysFlag="0"),
    ),
    Row(C.QUERY_CONSUMER_OFFSET, "gina", "alice", SUB_OR_GET_ORDERS, _cmd(14, **QUEUE, **EGROUP)),
    Row(
        C.UPDATE_CONSUMER_OFFSET,
        "uma",
        "gina",
        "Sub or Update on Topic:orders",
        _cmd(C.UPDATE_CONSUMER_OFFSET, **QUEUE, **EGROUP, commitOffset="0"),
    ),
    Row(C.GET_MAX_OFFSET, "gina", "alice", SUB_OR_GET_ORDERS, _cmd(C.GET_MAX_OFFSET, **QUEUE)),
    Row(C.GET_MIN_OFFSET, "erin", "alice", SUB_OR_GET_ORDERS, _cmd(C.GET_MIN_OFFSET, **QUEUE)),
    Row(
        C.SEARCH_OFFSET_BY_TIMESTAMP,
        "gina",
        "alice",
        SUB_OR_GET_ORDERS,
        _cmd(C.SEARCH_OFFSET_BY_TIMESTAMP, **QUEUE, timestamp="0"),
    ),
    Row(C.HEART_BEAT, "erin", "gina", "Sub on Group:GID_erin", _cmd(34, _json(HEARTBEAT))),
    Row(
        C.UNREGISTER_CLIENT,
        "erin",
        "alice",
        "Sub on Group:GID_erin",
        _cmd(C.UNREGISTER_CLIENT, clientID="c1", **EGROUP),
    ),
    Row(
        C.GET_CONSUMER_LIST_BY_GROUP,
        "erin",
        "gina",
        "Sub on Group:GID_erin",
        _cmd(C.GET_CONSUMER_LIST_BY_GROUP, **EGROUP),
    ),
    Row(C.LOCK_BATCH_MQ, "erin", "gina", "Sub on Group:GID_erin", _cmd(41, _json(MQ_SET))),
    Row(C.UNLOCK_BATCH_MQ, "erin", "uma", "Sub on Group:GID_erin", _cmd(42, _json(MQ_SET))),
    Row(C.GET_BROKER_RUNTIME_INFO, "nobody", None, "not signed", _cmd(28)),
    Row(
        C.UPDATE_AND_CREATE_TOPIC,
        "carl",
        "uma",
        "Create or Update on Topic:made-by-carl",
        _cmd(17, topic="made-by-carl", readQueueNums="1", writeQueueNums="1"),
    ),
    Row(C.GET_ALL_TOPIC_CONFIG, "lee", "gina", "List on Topic:*", _cmd(C.GET_ALL_TOPIC_CONFIG)),
    Row(
        C.QUERY_MESSAGE,
        "gina",
        "erin",
        "Get on Topic:orders",
        _cmd(
            C.QUERY_MESSAGE,
            topic="orders",
            key="k",
            maxNum="1",
            beginTimestamp="0",
            endTimestamp="9999999999999",
        ),
    ),
    Row(C.GET_TOPIC_STATS_INFO, "gina", "erin", "Get on Topic:orders", _cmd(202, topic="orders")),
    Row(C.VIEW_MESSAGE_BY_ID, "vic", "gina", "Get on Topic:*", _cmd(33, offset="0")),
    Row(C.GET_CONSUME_STATS, "gina", "erin", "Get on Group:GID_erin", _cmd(208, **EGROUP)),
    Row(
        C.GET_CONSUMER_CONNECTION_LIST,
        "gina",
        "erin",
        "Get on Group:GID_erin",
        _cmd(C.GET_CONSUMER_CONNECTION_LIST, **EGROUP),
    ),
    Row(C.END_TRANSACTION, "alice", "erin", "Pub on Topic:orders", _end_transaction),
    Row(
        C.LITE_PULL_MESSAGE,
        "erin",
        "alice",
        "Sub on Topic:orders",
        _cmd(C.LITE_PULL_MESSAGE, **QUEUE, **EGROUP, queueOffset="0", maxMsgNums="1", sysFlag="0"),
    ),
    Row(C.GET_TOPIC_CONFIG, "gina", "erin", "Get on Topic:orders", _cmd(351, topic="orders")),
    Row(
        C.QUERY_TOPIC_CONSUME_BY_WHO,
        "gina",
        "erin",
        "Get on Topic:orders",
        _cmd(C.QUERY_TOPIC_CONSUME_BY_WHO, topic="orders"),
    ),
    Row(
        C.INVOKE_BROKER_TO_RESET_OFFSET,
        "uma",
        "gina",
        "Update on Group:GID_erin",
        _cmd(222, topic="orders", group="GID_erin", timestamp="0", isForce="true"),
    ),
    Row(C.CHECK_CLIENT_CONFIG, "nobody", None, "not signed", _cmd(C.CHECK_CLIENT_CONFIG)),
    Row(
        C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        "uma",
        "gina",
        "Create or Update on Group:GID_erin",
        _cmd(200, _json({"groupName": "GID_erin"})),
    ),
    Row(C.CONSUMER_SEND_MSG_BACK, "erin", "gina", "Sub on Group:GID_erin", _send_back),
]


def test_the_table_names_every_code_access_knows_and_the_front_end_handles() -> None:
    codes = [row.code for row in TABLE]
    assert len(codes) == len(set(codes)) == 30
    assert set(codes) == set(NEEDS) | set(OFFSET_NEEDS) == set(HANDLERS)


@pytest.fixture(scope="module")
def addr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc: BrokerProcess = start_with(
        Path(tmp_path_factory.mktemp("remoting-acl-table")),
        extra_toml=AUTH_TOML,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )
    line = next(x for x in proc.output if "remoting (4.x clients) on" in x)
    with RocketMQClient(proc.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as admin:
        admin.create_topic("orders", queues=1)
        admin.create_group("GID_erin")
        for user, rules in USERS.items():
            admin.create_user(*creds(user))
            for resource, actions in rules:
                admin.create_acl(user, resource, actions)
    yield line.rsplit(" ", 1)[1].strip()
    assert proc.stop() == 0, "".join(proc.output[-50:])


@pytest.mark.parametrize("row", TABLE, ids=[RequestCode(r.code).name for r in TABLE])
def test_each_code_is_allowed_with_its_right_and_refused_without(addr: str, row: Row) -> None:
    refused = _invoke(addr, creds(row.refused) if row.refused else None, row.request(addr))
    assert refused.code == ResponseCode.NO_PERMISSION, (refused.code, refused.remark)
    assert row.missing in refused.remark
    allowed = _invoke(addr, creds(row.allowed), row.request(addr))
    assert allowed.code != ResponseCode.NO_PERMISSION, (allowed.code, allowed.remark)
