"""Bad input against a real NameServer process: each gets an answer or a closed connection,
and the NameServer keeps serving everyone else (a registered broker stays registered)."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator

import pytest

from broker_core.namesrv.client import NameServerClient, TopicQueueConfig
from broker_core.remoting.codes import RequestCode, ResponseCode, SerializeType
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.frame import MAX_FRAME_BYTES, encode_frame, read_frame
from tests.namesrv.conftest import registration


def frame_of(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    total_len = 4 + len(header) + len(body)
    return struct.pack(">iI", total_len, (serialize_type << 24) | len(header)) + header + body


@pytest.fixture()
def canary(namesrv) -> Iterator[NameServerClient]:
    """A broker registered on its own connection while the bad input arrives."""
    client = NameServerClient(namesrv[1])
    topics = {"t-canary": TopicQueueConfig(2, 2)}
    client.register_broker(registration("canary", addr="127.0.0.1:50911", topics=topics))
    yield client
    client.close()


def connect(addr: str) -> socket.socket:
    host, _, port = addr.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def assert_still_serving(addr: str, canary: NameServerClient) -> None:
    other = NameServerClient(addr)
    try:
        assert "t-canary" in other.get_all_topics()
        assert other.get_route("t-canary").broker_datas[0].broker_name == "canary"
    finally:
        other.close()
    assert canary.get_route("t-canary").queue_datas[0].read_queue_nums == 2


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (struct.pack(">iI", 20, 100) + b"{}" + b"x" * 14, "header length 100 exceeds"),
        (struct.pack(">i", 2) + b"xx", "frame length 2 is below the minimum"),
        (struct.pack(">i", -1), "frame length -1 is below the minimum"),
        (frame_of(b"this is not json"), "header is not JSON"),
        (frame_of(b'{"code": "one hundred"}'), "'code' is not an integer"),
        (frame_of(b"{}", serialize_type=9), "unknown serialize type 9"),
        (struct.pack(">i", MAX_FRAME_BYTES + 1), f"exceeds {MAX_FRAME_BYTES} bytes"),
        (struct.pack(">i", 0x7FFFFFFF), f"exceeds {MAX_FRAME_BYTES} bytes"),
    ],
    ids=[
        "header-longer-than-frame",
        "too-short",
        "negative",
        "not-json",
        "code-not-int",
        "serialize-type",
        "oversize",
        "max-int",
    ],
)
def test_malformed_frame_is_answered_then_the_connection_closes(namesrv, canary, data, reason):
    with connect(namesrv[1]) as sock:
        sock.sendall(data)
        answer = read_frame(sock)
        assert answer is not None and answer.is_response
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark.startswith("malformed frame: ") and reason in answer.remark
        assert read_frame(sock) is None  # closed by the NameServer
    assert_still_serving(namesrv[1], canary)


def test_unknown_request_code_is_not_supported_and_the_connection_stays(namesrv, canary):
    with connect(namesrv[1]) as sock:
        unknown = RemotingCommand.request(4242)
        sock.sendall(encode_frame(unknown))
        answer = read_frame(sock)
        assert answer is not None and answer.opaque == unknown.opaque
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
        assert "4242" in answer.remark
        topics = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        sock.sendall(encode_frame(topics))
        answer = read_frame(sock)
        assert answer is not None and answer.code == ResponseCode.SUCCESS
        assert "t-canary" in json.loads(answer.body)["topicList"]
    assert_still_serving(namesrv[1], canary)


def test_a_client_that_vanishes_mid_frame_harms_no_one(namesrv, canary):
    with connect(namesrv[1]) as sock:
        sock.sendall(encode_frame(RemotingCommand.request(105, {"topic": "t"}))[:-5])
    assert_still_serving(namesrv[1], canary)


def test_a_request_without_its_header_field_gets_a_clear_error(namesrv, canary):
    with connect(namesrv[1]) as sock:
        sock.sendall(encode_frame(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC)))
        answer = read_frame(sock)
        assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == "request header is missing 'topic'"
    assert_still_serving(namesrv[1], canary)


def test_raw_json_numbers_and_binary_headers_are_understood(namesrv, canary):
    """ali-ons writes extFields values as JSON numbers; C++ clients may use binary headers."""
    header = {
        "code": RequestCode.UNREGISTER_BROKER,
        "language": "NODE_JS",
        "opaque": 77,
        "flag": 0,
        "extFields": {"clusterName": "c", "brokerName": "n", "brokerId": 0, "brokerAddr": "h:1"},
    }
    with connect(namesrv[1]) as sock:
        sock.sendall(frame_of(json.dumps(header).encode()))
        answer = read_frame(sock)
        assert answer is not None and (answer.code, answer.opaque) == (ResponseCode.SUCCESS, 77)
        route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t-canary"})
        route.serialize_type = SerializeType.ROCKETMQ
        sock.sendall(encode_frame(route))
        answer = read_frame(sock)
        assert answer is not None and answer.serialize_type == SerializeType.ROCKETMQ
        assert answer.code == ResponseCode.SUCCESS
        assert json.loads(answer.body)["brokerDatas"][0]["brokerName"] == "canary"
