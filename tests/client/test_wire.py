"""``wire``: SendMessage requests written as bytes parse to what ``batch_to_protobuf`` builds.

Most tests need no network: they parse the bytes with the generated
``SendMessageRequest`` and compare every message, field by field and as deterministic
bytes, with the objects ``pb_reference.batch_to_protobuf`` builds for the same input (only
``message_id`` and ``born_timestamp`` differ by nature; they are checked on their own).
The last part sends through a real broker and reads the messages back.
"""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import pytest
from google.protobuf.wrappers_pb2 import Int64Value
from hypothesis import given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2

from broker_core import errors
from broker_core.client import OutgoingMessage, RocketMQClient
from broker_core.client.in_flight import receipts_of
from broker_core.client.pb_fields import varint
from broker_core.client.wire import encode_messages, encode_send_request
from broker_core.message import new_message_id
from tests.client.pb_reference import batch_to_protobuf

ID_RE = re.compile(r"01[0-9A-F]{32}")


def parse(raw: bytes) -> list[Any]:
    return list(service_pb2.SendMessageRequest.FromString(raw).messages)


def built(
    topic: str, messages: Sequence[Any], *, namespace: str = "", recovery_ms: int | None = None
) -> list[Any]:
    """What the protobuf path builds (and ``transactions.prepare`` adds for halves)."""
    protos = batch_to_protobuf(topic, map(OutgoingMessage.of, messages), namespace=namespace)
    if recovery_ms is not None:
        for proto in protos:
            proto.system_properties.message_type = pb.MessageType.TRANSACTION
            proto.system_properties.orphaned_transaction_recovery_duration.FromMilliseconds(
                recovery_ms
            )
    return protos


def without_stamps(msg: Any) -> Any:
    copy = pb.Message()
    copy.CopyFrom(msg)
    copy.system_properties.ClearField("message_id")
    copy.system_properties.ClearField("born_timestamp")
    return copy


def assert_same(got: list[Any], want: list[Any]) -> None:
    """Equal messages; fresh, unique, well-formed ids and one recent born time."""
    assert len(got) == len(want)
    ids = [m.system_properties.message_id for m in got]
    assert all(ID_RE.fullmatch(i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    born_ms = {m.system_properties.born_timestamp.ToMilliseconds() for m in got}
    assert len(born_ms) <= 1 and all(abs(b - time.time() * 1000) < 60_000 for b in born_ms)
    for mine, theirs in zip(got, want, strict=True):
        mine, theirs = without_stamps(mine), without_stamps(theirs)
        assert mine == theirs, f"{mine}\n!=\n{theirs}"
        # equal bytes also means equal presence of every optional field
        assert mine.SerializeToString(deterministic=True) == theirs.SerializeToString(
            deterministic=True
        )


def check_like_protobuf(topic: str, messages: Sequence[Any], **kwargs: Any) -> None:
    raw, count = encode_messages(topic, messages, **kwargs)
    assert count == len(messages)
    recovery_ms = kwargs.pop("transaction_recovery_ms", None)
    assert_same(parse(raw), built(topic, messages, recovery_ms=recovery_ms, **kwargs))


# ---- same messages as the protobuf path -------------------------------------------------------


@pytest.mark.parametrize("value", [1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1, -1, -(2**63)])
def test_varint_is_protobufs(value: int) -> None:
    assert b"\x08" + varint(value) == Int64Value(value=value).SerializeToString()
    assert varint(0) == b"\x00"


@pytest.mark.parametrize("size", [1, 127, 128, 16_383, 16_384, 20_000, 2_100_000])
def test_body_sizes_needing_longer_varints(size: int) -> None:
    body = bytes(i % 251 for i in range(size))
    check_like_protobuf("orders", [body, body[: size // 2 + 1], b"%"])


@pytest.mark.parametrize("topic", ["t", "a%b|c_d-e", "%" * 127])
@pytest.mark.parametrize("namespace", ["", "ns", "名前%空間"])
def test_topic_and_namespace_even_with_percent_signs(topic: str, namespace: str) -> None:
    check_like_protobuf(topic, [b"x" * 200, b"%s%d"], namespace=namespace)
    check_like_protobuf(topic, [OutgoingMessage(b"%", "t%g")], namespace=namespace)


@pytest.mark.parametrize(
    "messages",
    [
        [OutgoingMessage(b"a", "TagA"), OutgoingMessage(b"b"), OutgoingMessage(b"c", "")],
        [
            OutgoingMessage(b"a", keys=("k1", "ключ")),
            OutgoingMessage(b"b", keys=()),
            OutgoingMessage(b"c", keys=[""]),
            OutgoingMessage(b"d", keys=None),
        ],  # type: ignore[arg-type]
        [
            OutgoingMessage(b"a", properties={"région": "é", "n": ""}),
            OutgoingMessage(b"b"),
            OutgoingMessage(b"c", properties={}),
        ],
        [OutgoingMessage(b"a", message_group="g1"), OutgoingMessage(b"b", message_group="")],
        [
            OutgoingMessage(b"a", delivery_timestamp_ms=ms)
            for ms in (0, 1, 999, 1000, 1_700_000_000_123, -1, -1001, 253402300799999)
        ],
        [
            OutgoingMessage(b"a", "T", ("k",), {"p": "v"}, "g"),
            (b"b", "T2"),
            b"bare",
            "text",
            OutgoingMessage(b"c", delivery_timestamp_ms=5),
        ],
        [bytearray(b"buffer"), memoryview(b"view")],
    ],
)
def test_message_shapes(messages: list[Any]) -> None:
    check_like_protobuf("orders", messages)
    check_like_protobuf("orders", messages, namespace="ns")


texts = st.text(max_size=8)
_messages = st.builds(
    OutgoingMessage,
    body=st.binary(min_size=1, max_size=300),
    tag=st.none() | texts,
    keys=st.lists(texts, max_size=3).map(tuple),
    properties=st.none() | st.dictionaries(texts, texts, max_size=3),
    message_group=st.none() | texts,
    delivery_timestamp_ms=st.none() | st.integers(-62135596800000, 253402300799999),
).map(lambda m: m._replace(delivery_timestamp_ms=None) if m.message_group else m)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(messages=st.lists(_messages, min_size=1, max_size=12), namespace=st.sampled_from(["", "n"]))
def test_any_batch_encodes_like_protobuf(messages: list[OutgoingMessage], namespace: str) -> None:
    check_like_protobuf("orders", messages, namespace=namespace)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(messages=st.lists(_messages, min_size=1, max_size=8), recovery_ms=st.integers(0, 10**12))
def test_transactional_halves_encode_like_prepare(
    messages: list[OutgoingMessage], recovery_ms: int
) -> None:
    halves = [m._replace(delivery_timestamp_ms=None) for m in messages]
    check_like_protobuf("orders", halves, transaction_recovery_ms=recovery_ms)
    check_like_protobuf("orders", [m.body for m in halves], transaction_recovery_ms=recovery_ms)


def test_columns_take_properties_as_any_mapping_and_bare_bodies_take_the_same_path() -> None:
    bodies = [b"one", b"two" * 100]
    plain = parse(encode_send_request("orders", bodies))
    general = parse(encode_send_request("orders", bodies, tags=[None, ""], properties=[None, {}]))
    assert [without_stamps(m) for m in plain] == [without_stamps(m) for m in general]
    assert_same(general, built("orders", bodies))
    props = parse(encode_send_request("orders", [b"x"], properties=[MappingProxyType({"a": "1"})]))
    assert dict(props[0].user_properties) == {"a": "1"}


def test_every_call_stamps_new_unique_ids_from_any_thread() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def send_some() -> None:
        for _ in range(20):
            ids = [
                m.system_properties.message_id
                for m in parse(encode_send_request("orders", [b"x"] * 256))
            ]
            with lock:
                seen.extend(ids)

    threads = [threading.Thread(target=send_some) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4 * 20 * 256 == len(set(seen))


def _child_ids(conn: Any) -> None:
    conn.send([m.system_properties.message_id for m in parse(encode_send_request("t", [b"x"]))])


def test_a_forked_process_draws_its_own_id_prefix() -> None:
    [parent] = parse(encode_send_request("t", [b"x"]))  # the parent has its prefix
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_child_ids, args=(theirs,))
    child.start()
    [child_id] = ours.recv()
    child.join(10)
    assert child.exitcode == 0
    assert child_id[2:18] != parent.system_properties.message_id[2:18]  # random + pid


def _child_new_id(conn: Any) -> None:
    conn.send(new_message_id())


def test_a_forked_process_does_not_repeat_the_brokers_ids() -> None:
    """``new_message_id`` (the broker's ids for messages sent without one) after a fork."""
    parent = new_message_id()
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_child_new_id, args=(theirs,))
    child.start()
    child_id = ours.recv()
    child.join(10)
    assert child.exitcode == 0
    assert child_id[2:18] != parent[2:18]


# ---- the same errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "messages"),
    [
        ("orders", [b""]),
        ("orders", [b"a", b"b", b""]),
        ("orders", [OutgoingMessage(b"x", message_group="g", delivery_timestamp_ms=1)]),
        ("orders", [b"a", OutgoingMessage(b"x", message_group="g", delivery_timestamp_ms=1), b""]),
        ("orders", [b"a", OutgoingMessage(b"", message_group="g", delivery_timestamp_ms=1)]),
        ("orders", [b"", OutgoingMessage(b"x", message_group="g", delivery_timestamp_ms=1)]),
        ("bad topic", [b"x"]),
        ("bad topic", []),
        ("", [b"x"]),
        ("t" * 128, [b"x"]),
        ("orders", [OutgoingMessage(b"x", delivery_timestamp_ms=253402300800000)]),
        ("orders", [OutgoingMessage(b"x", delivery_timestamp_ms=-62135596800001)]),
        ("orders", [OutgoingMessage(b"x", 7)]),  # type: ignore[arg-type]
        ("orders", [OutgoingMessage(b"x", keys=[None])]),  # type: ignore[list-item]
        ("orders", [OutgoingMessage(b"x", properties={"a": 1})]),  # type: ignore[dict-item]
        ("orders", [OutgoingMessage(b"x", message_group=3)]),  # type: ignore[arg-type]
    ],
)
def test_bad_input_raises_what_the_protobuf_path_raises(topic: str, messages: list[Any]) -> None:
    with pytest.raises(Exception) as want:  # the type is what we compare
        built(topic, messages)
    with pytest.raises(type(want.value)) as got:
        encode_messages(topic, messages)
    if not isinstance(want.value, TypeError):  # TypeError texts are protobuf's own
        assert str(got.value) == str(want.value)


def test_bad_columns_and_transactional_arguments() -> None:
    with pytest.raises(errors.InvalidArgumentError, match="'tags' has 1 entries for 2"):
        encode_send_request("t", [b"a", b"b"], tags=["x"])
    with pytest.raises(errors.InvalidArgumentError, match="cannot have a delivery time"):
        encode_send_request("t", [b"a"], delivery_ms=[5], transaction_recovery_ms=1000)
    with pytest.raises(errors.InvalidArgumentError, match=">= 0"):
        encode_send_request("t", [b"a"], transaction_recovery_ms=-1)
    assert encode_send_request("t", []) == b""


def test_receipts_check_every_entry_status() -> None:
    ok = pb.Status(code=pb.Code.OK)
    entries = [
        service_pb2.SendResultEntry(status=ok, message_id="m1", offset=3),
        service_pb2.SendResultEntry(
            status=pb.Status(code=pb.Code.MESSAGE_BODY_TOO_LARGE, message="big")
        ),
    ]
    response = service_pb2.SendMessageResponse(status=ok, entries=entries[:1])
    [receipt] = receipts_of(response, 1)
    assert (receipt.message_id, receipt.offset) == ("m1", 3)
    with pytest.raises(errors.RocketMQError, match="1 entries for 2 messages"):
        receipts_of(response, 2)
    with pytest.raises(errors.MessageTooLargeError, match="big"):
        receipts_of(service_pb2.SendMessageResponse(status=ok, entries=entries), 2)


# ---- through a broker -----------------------------------------------------------------------


def test_send_batch_round_trips_every_field(client: RocketMQClient) -> None:
    client.create_topic("wire-e2e", queues=1)
    items: list[Any] = [
        OutgoingMessage(bytes(range(256)) * 80, "Tåg", ("k1", "ключ"), {"région": "ü", "n": "1"}),
        OutgoingMessage(b"plain"),
        (b"grouped", None, (), None, "grp-1"),
        b"bare",
        "text body",
    ]
    receipts = client.send_batch("wire-e2e", items)
    assert [r.offset for r in receipts] == list(range(len(items)))
    got = client.pull("GID_wire", "wire-e2e", 0, 0, 10).messages
    assert [m.message_id for m in got] == [r.message_id for r in receipts]
    wanted = [OutgoingMessage.of(item) for item in items]
    assert [(m.body, m.tag, m.keys, dict(m.properties), m.message_group) for m in got] == [
        (w.body, w.tag, tuple(w.keys), w.properties or {}, w.message_group) for w in wanted
    ]
    assert [m.message_type for m in got] == ["NORMAL", "NORMAL", "FIFO", "NORMAL", "NORMAL"]


def test_call_takes_serialized_requests_with_the_same_error_mapping(
    client: RocketMQClient,
) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="no message"):
        client.call("SendMessage", b"")  # an empty SendMessageRequest
    client.create_topic("wire-halves", queues=1)
    raw = encode_send_request("wire-halves", [b"half"], transaction_recovery_ms=60_000)
    [entry] = client.call("SendMessage", raw).entries
    assert entry.transaction_id
    assert client.pull("GID_wire", "wire-halves", 0, 0, 1).messages == []  # still a half
    end = service_pb2.EndTransactionRequest(
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=pb.TransactionResolution.COMMIT,
        source=pb.TransactionSource.SOURCE_CLIENT,
    )
    end.topic.name = "wire-halves"
    client.call("EndTransaction", end)
    [msg] = client.pull("GID_wire", "wire-halves", 0, 0, 1).messages
    assert (msg.body, msg.message_id) == (b"half", entry.message_id)


def test_send_columns_sends_one_request_from_columns(client: RocketMQClient) -> None:
    client.create_topic("wire-columns", queues=1)
    receipts = client.send_columns(
        "wire-columns",
        [b"a", b"b", b"c"],
        tags=["T", None, "T"],
        keys=[("k1",), None, ()],
        properties=[None, {"p": "v"}, None],
    )
    got = client.pull("GID_wire", "wire-columns", 0, 0, 10).messages
    assert [m.message_id for m in got] == [r.message_id for r in receipts]
    assert [(m.body, m.tag, m.keys, dict(m.properties)) for m in got] == [
        (b"a", "T", ("k1",), {}),
        (b"b", None, (), {"p": "v"}),
        (b"c", "T", (), {}),
    ]
    with pytest.raises(errors.InvalidArgumentError, match="at least one message"):
        client.send_columns("wire-columns", [])
