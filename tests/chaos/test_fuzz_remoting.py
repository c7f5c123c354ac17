"""Fuzz the remoting port of one real broker process with bad frames and bad requests.

Input: frames with wrong lengths (negative, beyond the limit, shorter or longer than what
follows), header lengths that overrun, headers that are not JSON (or JSON of the wrong
shape, nested deeply), huge extFields, unknown request codes, random bytes, and every
request code the broker handles with hostile header values and bodies.

Each bad frame closes only its own connection; each well-framed request gets a response
(never an "internal error": a handler that fails on input is a bug). Meanwhile a canary
connection keeps sending and pulling, and afterwards the broker process is alive and still
serves what it stored before.
"""

from __future__ import annotations

import errno
import json
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode, ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.frame import decode_frame, encode_frame, read_frame
from broker_core.remoting_broker.frontend import HANDLERS
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.server.conftest import DEFAULT_CONFIG

TOPIC = "fz-remoting"
CODES = sorted(int(c) for c in HANDLERS)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    proc = launch_broker(
        tmp_path_factory.mktemp("fz-remoting"),
        config=DEFAULT_CONFIG,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
    )
    line = next(x for x in proc.output if "remoting (4.x clients) on" in x)
    addr = line.rsplit(" ", 1)[1].strip()
    yield proc, addr
    assert proc.stop() == 0, "".join(proc.output[-60:])


@pytest.fixture(scope="module")
def canary(broker: tuple[BrokerProcess, str]) -> Iterator[RemotingClient]:
    client = RemotingClient(broker[1], 10.0)
    resp = client.invoke(
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": "1", "writeQueueNums": "1"},
        )
    )
    assert resp.code == 0
    assert send(client, b"before").code == 0
    yield client
    client.close()


def send(client: RemotingClient, body: bytes) -> RemotingCommand:
    return client.invoke(
        RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": TOPIC, "e": "0", "i": ""}, body
        )
    )


def assert_canary_fine(client: RemotingClient) -> None:
    assert send(client, b"canary").code == 0
    got = client.invoke(
        RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "fz-canary",
                "topic": TOPIC,
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "1",
                "sysFlag": "0",
            },
        )
    )
    assert got.code == 0 and b"before" in got.body


ANSWER_TIMEOUT_S = 10.0
CLOSED_ERRNOS = {errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN}


def raw_exchange(addr: str, data: bytes) -> RemotingCommand | None:
    """Send raw bytes and half-close; the broker's answer (exactly one whole frame), or
    ``None`` when it closed the connection (EOF, or a reset) without a byte. A broker that
    neither answers nor closes within ``ANSWER_TIMEOUT_S`` fails the test, as do bytes that
    are not one well-formed frame."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # a frame cut short ends here: the broker sees EOF
        except OSError as exc:  # it read enough to refuse and closed (reset) already
            if exc.errno not in CLOSED_ERRNOS:
                raise
        received = read_until_closed(sock)
    return decode_frame(received) if received else None


def read_until_closed(sock: socket.socket) -> bytes:
    """Every byte until the broker closes (a reset counts as a close)."""
    received = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return bytes(received)
        except TimeoutError:
            raise AssertionError(
                f"the broker neither answered nor closed within {ANSWER_TIMEOUT_S} s"
                f" ({len(received)} bytes so far)"
            ) from None
        if not chunk:
            return bytes(received)
        received += chunk


def frame(header: bytes, body: bytes = b"", kind: int = 0, total: int | None = None) -> bytes:
    length = 4 + len(header) + len(body) if total is None else total
    return struct.pack(">iI", length, (kind << 24) | len(header)) + header + body


BAD_FRAMES = {
    "negative length": struct.pack(">i", -5) + b"x" * 8,
    "length beyond the limit": struct.pack(">i", 1 << 30) + b"x" * 8,
    "header longer than frame": struct.pack(">iI", 8, 400) + b"{}" * 2,
    "not JSON": frame(b"this is not json"),
    "JSON array": frame(b"[1, 2, 3]"),
    "JSON without code": frame(b'{"opaque": 1}'),
    "deeply nested": frame(b'{"code": 10, "extFields": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "unknown serialize type": frame(b"{}", kind=7),
    "binary header cut": frame(b"\x00\x0a\x00", kind=1),
    "cut short": frame(b'{"code": 34, "opaque": 1, "flag": 0}', b"x" * 100, total=4000),
}


CLOSED_WITHOUT_ANSWER = {"cut short"}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_malformed_frames_close_only_their_connection(broker, canary, name):
    answer = raw_exchange(broker[1], BAD_FRAMES[name])
    if name in CLOSED_WITHOUT_ANSWER:  # nothing to answer: the request never arrived whole
        assert answer is None
    else:  # the broker says what was wrong, then closes
        assert answer is not None, "closed without saying why"
        assert answer.code == ResponseCode.SYSTEM_ERROR, (answer.code, answer.remark)
        assert answer.remark.startswith("malformed frame: "), answer.remark
    assert broker[0].process.poll() is None
    assert_canary_fine(canary)


def test_huge_ext_fields_and_unknown_codes(broker, canary):
    huge = {f"k{i}": "v" * 1000 for i in range(2000)}  # ~2 MB of header
    client = RemotingClient(broker[1], 20.0)
    try:
        resp = client.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, huge, b"{}"))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        for code in (0, 1, 999, 30000, -1 & 0x7FFF, 200050):
            assert client.invoke(RemotingCommand.request(code)).code == (
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            )
    finally:
        client.close()
    assert_canary_fine(canary)


HOSTILE_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "9" * 30,
            "-9" * 10,
            "abc",
            TOPIC,
            "%RETRY%x",
            "x" * 300,
            "true",
            "\x00",
            "1e9",
        ]
    ),
    st.text(max_size=20),
)
FIELD_NAMES = [
    "a",
    "b",
    "e",
    "f",
    "i",
    "m",
    "topic",
    "queueId",
    "queueOffset",
    "maxMsgNums",
    "sysFlag",
    "commitOffset",
    "suspendTimeoutMillis",
    "subscription",
    "expressionType",
    "consumerGroup",
    "group",
    "offset",
    "delayLevel",
    "maxReconsumeTimes",
    "timestamp",
    "clientID",
    "producerGroup",
    "commitOrRollback",
    "msgId",
    "readQueueNums",
    "writeQueueNums",
    "perm",
]
BODIES = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"{}",
            b"[]",
            b'{"clientID": 5}',
            b'{"clientID": "c", "consumerDataSet": [{"groupName": 1}]}',
            b'{"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": "t", "queueId": "x"}]}',
            json.dumps(
                {
                    "clientID": "c",
                    "consumerDataSet": [
                        {
                            "groupName": "g",
                            "subscriptionDataSet": [
                                {"topic": TOPIC, "subString": "a = ", "expressionType": "SQL92"}
                            ],
                        }
                    ],
                }
            ).encode(),
        ]
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    code=st.sampled_from(CODES),
    fields=st.dictionaries(st.sampled_from(FIELD_NAMES), HOSTILE_TEXT, max_size=8),
    body=BODIES,
)
def test_hostile_requests_get_answers_not_internal_errors(broker, canary, code, fields, body):
    if code == RequestCode.PULL_MESSAGE:
        fields["suspendTimeoutMillis"] = "0"  # a parked pull would only make this slow
    resp = canary.invoke(RemotingCommand.request(code, fields, body), 10.0)
    assert resp.is_response
    assert "internal error" not in resp.remark, (code, fields, body, resp.remark)


def test_bad_lock_bodies_are_clear_errors(canary):
    for body in (
        b'{"mqSet": [{"topic": "t", "queueId": "x"}]}',
        b'{"mqSet": [{}]}',
        b'{"mqSet": [{"topic": "t", "queueId": null}]}',
    ):
        resp = canary.invoke(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, {}, body))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "mqSet" in resp.remark


def test_broker_still_serves_after_the_fuzz(broker, canary):
    assert broker[0].process.poll() is None
    assert_canary_fine(canary)
    assert not [x for x in broker[0].output if "Traceback" in x], "".join(broker[0].output[-80:])


def test_a_frame_that_encodes_fine_is_still_answered(broker):
    host, _, port = broker[1].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_frame(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)))
        answer = read_frame(sock)
    assert answer is not None and answer.code == 0
