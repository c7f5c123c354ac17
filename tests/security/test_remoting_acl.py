"""ACL on the 4.x remoting port: requests signed as ``AclClientRPCHook`` signs them (our
``RemotingClient(credentials=...)``), the same users and rules as the gRPC port, refusals
answered NO_PERMISSION (16) with the reason, and nothing done for a refused request."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from broker_core.message import decode_offset_message_id
from broker_core.protocol.property_codec import encode_text
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from tests.remoting_records import decode_stored
from tests.security.conftest import ADMIN_KEY, ADMIN_SECRET, AUTH_TOML, start_with
from tests.server.conftest import BrokerProcess

ALICE = ("alice", "alice-secret")  # Pub on orders only
CAROL = ("carol", "carol-secret")  # Pub on payments only: the owner of its transactions
ERIN = ("erin", "erin-secret")  # Sub on orders and on Group:GID_erin
BOB = ("bob", "bob-secret")  # Pub+Sub on every topic, Deny Pub on payments, Sub on GID_*


@pytest.fixture(scope="module")
def remoting_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    proc = start_with(
        Path(tmp_path_factory.mktemp("remoting-acl")),
        extra_toml=AUTH_TOML,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )
    line = next(x for x in proc.output if "remoting (4.x clients) on" in x)
    with RocketMQClient(proc.endpoint, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as admin:
        for topic in ("orders", "payments"):
            admin.create_topic(topic, queues=1)
        admin.create_user(*ALICE)
        admin.create_acl("alice", "Topic:orders", ["Pub"])
        admin.create_user(*BOB)
        admin.create_acl("bob", "Topic:*", ["Pub", "Sub"])
        admin.create_acl("bob", "Topic:payments", ["Pub"], decision="Deny")
        admin.create_acl("bob", "Group:GID_*", ["Sub"])
        admin.create_user(*CAROL)
        admin.create_acl("carol", "Topic:payments", ["Pub"])
        admin.create_user(*ERIN)
        admin.create_acl("erin", "Topic:orders", ["Sub"])
        admin.create_acl("erin", "Group:GID_erin", ["Sub"])
    yield proc, line.rsplit(" ", 1)[1].strip()
    assert proc.stop() == 0, "".join(proc.output[-50:])


def _invoke(addr: str, credentials: tuple[str, str] | None, cmd: RemotingCommand):  # type: ignore[no-untyped-def]
    client = RemotingClient(addr, timeout_s=10.0, credentials=credentials)
    try:
        return client.invoke(cmd)
    finally:
        client.close()


def _send(topic: str, body: bytes) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": topic, "e": "0", "i": ""}, body
    )


def _pull(topic: str, group: str) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0"}
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE, {**fields, "maxMsgNums": "32", "sysFlag": "0"}
    )


def _records(addr: str, topic: str) -> list[dict]:  # type: ignore[type-arg]
    resp = _invoke(addr, (ADMIN_KEY, ADMIN_SECRET), _pull(topic, "GID_reader"))
    if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST):
        return []
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return decode_stored(resp.body)  # type: ignore[no-any-return]


def _bodies(addr: str, topic: str) -> list[bytes]:
    return [m["body"] for m in _records(addr, topic)]


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [
        (None, "not signed"),
        (("alice", "wrong-secret"), "signature mismatch for access key 'alice'"),
        (("mallory", "x"), "unknown access key 'mallory'"),
    ],
)
def test_unsigned_and_badly_signed_requests_get_no_permission_and_store_nothing(
    remoting_auth: tuple[BrokerProcess, str], credentials, reason
) -> None:
    _, addr = remoting_auth
    before = _bodies(addr, "orders")
    resp = _invoke(addr, credentials, _send("orders", b"forged"))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert reason in resp.remark
    assert _bodies(addr, "orders") == before


def test_a_user_with_pub_on_orders_sends_there_only(
    remoting_auth: tuple[BrokerProcess, str],
) -> None:
    _, addr = remoting_auth
    assert _invoke(addr, ALICE, _send("orders", b"from alice")).code == ResponseCode.SUCCESS
    assert b"from alice" in _bodies(addr, "orders")
    denied = _invoke(addr, ALICE, _send("payments", b"never"))
    assert denied.code == ResponseCode.NO_PERMISSION
    assert "user 'alice' may not Pub on Topic:payments" in denied.remark
    assert b"never" not in _bodies(addr, "payments")
    pull = _invoke(addr, ALICE, _pull("orders", "GID_alice"))
    assert pull.code == ResponseCode.NO_PERMISSION and "Sub on Topic:orders" in pull.remark
    create = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "alice-made", "readQueueNums": "1", "writeQueueNums": "1"},
    )
    made = _invoke(addr, ALICE, create)
    assert made.code == ResponseCode.NO_PERMISSION and "Topic:alice-made" in made.remark
    assert _invoke(addr, (ADMIN_KEY, ADMIN_SECRET), create).code == ResponseCode.SUCCESS


def test_deny_beats_allow_and_groups_are_checked(remoting_auth: tuple[BrokerProcess, str]) -> None:
    _, addr = remoting_auth
    assert _invoke(addr, BOB, _send("orders", b"from bob")).code == ResponseCode.SUCCESS
    denied = _invoke(addr, BOB, _send("payments", b"denied"))
    assert denied.code == ResponseCode.NO_PERMISSION and "Pub on Topic:payments" in denied.remark
    assert _invoke(addr, BOB, _pull("orders", "GID_bob")).code == ResponseCode.SUCCESS
    other = _invoke(addr, BOB, _pull("orders", "other-group"))
    assert other.code == ResponseCode.NO_PERMISSION and "Group:other-group" in other.remark
    unlisted = _invoke(addr, BOB, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert unlisted.code == ResponseCode.NO_PERMISSION and "List on Topic:*" in unlisted.remark


def _prepare(addr: str, credentials: tuple[str, str], topic: str, body: bytes) -> dict[str, str]:
    """Send a half message as ``credentials``; the END_TRANSACTION fields a Java producer
    derives from the answer (UNIQ_KEY, and commitLogOffset from the offset ``msgId``)."""
    props = encode_text({"TRAN_MSG": "true", "PGROUP": "pg-tx"})
    fields = {"a": "pg-tx", "b": topic, "e": "0", "f": "4", "i": props}
    sent = _invoke(
        addr, credentials, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)
    )
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    _, physical_offset = decode_offset_message_id(sent.ext_fields["msgId"])
    tx_id = sent.ext_fields["transactionId"]
    return {"msgId": tx_id, "transactionId": tx_id, "commitLogOffset": str(physical_offset)}


def _end(addr: str, credentials: tuple[str, str], fields: dict[str, str]) -> RemotingCommand:
    header = {"producerGroup": "pg-tx", "commitOrRollback": "8", "fromTransactionCheck": "false"}
    cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, {**header, **fields})
    return _invoke(addr, credentials, cmd)  # type: ignore[no-any-return]


def test_end_transaction_needs_pub_on_the_half_messages_real_topic(
    remoting_auth: tuple[BrokerProcess, str],
) -> None:
    _, addr = remoting_auth
    payment = _prepare(addr, CAROL, "payments", b"carol's payment")
    order = _prepare(addr, ALICE, "orders", b"alice's order")
    denied = _end(addr, ALICE, payment)
    assert denied.code == ResponseCode.NO_PERMISSION
    assert "user 'alice' may not Pub on Topic:payments" in denied.remark
    # naming her own half's offset with the payment's msgId does not pass either
    forged = _end(addr, ALICE, {**payment, "commitLogOffset": order["commitLogOffset"]})
    assert forged.code == ResponseCode.SYSTEM_ERROR
    assert f"no half message {payment['msgId']} at commitlog offset" in forged.remark
    for offset in ("1", str(10**15), ""):  # inside a record, past the log, missing
        bad = _end(addr, ALICE, {**payment, "commitLogOffset": offset})
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert "commitlog offset" in bad.remark or "commitLogOffset" in bad.remark
    unknown = _end(addr, ALICE, {**order, "msgId": "NO-SUCH-HALF"})
    assert unknown.code == ResponseCode.SYSTEM_ERROR
    assert "no unresolved half message NO-SUCH-HALF" in unknown.remark
    assert b"carol's payment" not in _bodies(addr, "payments")
    assert _end(addr, ALICE, order).code == ResponseCode.SUCCESS
    assert b"alice's order" in _bodies(addr, "orders")
    owner = _end(addr, CAROL, payment)
    assert owner.code == ResponseCode.SUCCESS, owner.remark
    assert b"carol's payment" in _bodies(addr, "payments")


def test_end_transaction_at_random_offsets_never_ends_anything(
    remoting_auth: tuple[BrokerProcess, str],
) -> None:
    _, addr = remoting_auth
    payment = _prepare(addr, CAROL, "payments", b"fuzzed payment")
    real_offset = int(payment["commitLogOffset"])
    rng = random.Random(16)
    offsets = {rng.randrange(0, real_offset + 4096) for _ in range(60)} - {real_offset}
    header = {"producerGroup": "pg-tx", "commitOrRollback": "8", "fromTransactionCheck": "false"}
    client = RemotingClient(addr, timeout_s=10.0, credentials=ALICE)
    try:
        for offset in sorted(offsets):
            fields = {**header, **payment, "commitLogOffset": str(offset)}
            resp = client.invoke(RemotingCommand.request(RequestCode.END_TRANSACTION, fields))
            assert resp.code == ResponseCode.SYSTEM_ERROR, (offset, resp.remark)
            assert f"no half message {payment['msgId']} at commitlog offset {offset}" in resp.remark
    finally:
        client.close()
    assert b"fuzzed payment" not in _bodies(addr, "payments")
    assert _end(addr, CAROL, payment).code == ResponseCode.SUCCESS
    assert b"fuzzed payment" in _bodies(addr, "payments")


def _offset_of(addr: str, topic: str, body: bytes) -> int:
    return next(int(m["physical_offset"]) for m in _records(addr, topic) if m["body"] == body)


def test_send_back_needs_sub_on_the_topic_of_the_message_at_the_offset(
    remoting_auth: tuple[BrokerProcess, str],
) -> None:
    """A consumer group's retry/DLQ topic cannot be used to copy another topic's message."""
    _, addr = remoting_auth
    for topic, body in (("payments", b"secret payment"), ("orders", b"erin's order")):
        sent = _invoke(addr, (ADMIN_KEY, ADMIN_SECRET), _send(topic, body))
        assert sent.code == ResponseCode.SUCCESS, sent.remark

    def send_back(offset: str) -> RemotingCommand:
        fields = {"group": "GID_erin", "offset": offset, "delayLevel": "-1"}
        fields |= {"originTopic": "orders", "maxReconsumeTimes": "16"}
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
        return _invoke(addr, ERIN, cmd)  # type: ignore[no-any-return]

    stolen = send_back(str(_offset_of(addr, "payments", b"secret payment")))
    assert stolen.code == ResponseCode.NO_PERMISSION
    assert "user 'erin' may not Sub on Topic:payments" in stolen.remark
    for bogus in ("1", str(10**15), ""):
        failed = send_back(bogus)
        assert failed.code == ResponseCode.SYSTEM_ERROR and "offset" in failed.remark
    own = send_back(str(_offset_of(addr, "orders", b"erin's order")))
    assert own.code == ResponseCode.SUCCESS, own.remark
    assert _bodies(addr, "%DLQ%GID_erin") == [b"erin's order"]  # to the DLQ at once (-1)
