"""Frame codec: round trips for both header types, exact bytes, and every malformed shape."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_core.errors import RemotingFrameError
from broker_core.remoting.codes import LanguageCode, SerializeType
from broker_core.remoting.command import RPC_ONEWAY, RPC_TYPE_RESPONSE, RemotingCommand
from broker_core.remoting.frame import MAX_FRAME_BYTES, decode_frame, decode_payload, encode_frame

TYPES = [SerializeType.JSON, SerializeType.ROCKETMQ]


def frame_of(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """A frame built by hand from its parts (the layout of the frame.py byte table)."""
    return struct.pack(">iI", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + (
        header + body
    )


commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    language=st.sampled_from(list(LanguageCode)).map(int),
    version=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.text(max_size=50),
    ext_fields=st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=8),
    body=st.binary(max_size=300),
)


@settings(max_examples=200, deadline=None)
@given(cmd=commands, serialize_type=st.sampled_from(TYPES))
def test_any_command_round_trips_in_both_header_types(cmd: RemotingCommand, serialize_type: int):
    cmd.serialize_type = serialize_type
    decoded = decode_frame(encode_frame(cmd))
    assert decoded == cmd


def test_json_frame_bytes_follow_the_layout():
    cmd = RemotingCommand(code=105, opaque=7, ext_fields={"topic": "t"}, body=b"xy")
    data = encode_frame(cmd)
    total_len, len_and_type = struct.unpack_from(">iI", data)
    assert total_len == len(data) - 4
    assert len_and_type >> 24 == SerializeType.JSON
    header = json.loads(data[8 : 8 + (len_and_type & 0xFFFFFF)])
    assert header == {
        "code": 105,
        "language": "PYTHON",
        "version": 0,
        "opaque": 7,
        "flag": 0,
        "extFields": {"topic": "t"},
        "serializeTypeCurrentRPC": "JSON",
    }
    assert data.endswith(b"xy")


def test_binary_header_bytes_follow_the_layout():
    cmd = RemotingCommand(code=105, language=0, version=1, opaque=7, flag=1, remark="r")
    cmd.ext_fields = {"k": "vv"}
    cmd.serialize_type = SerializeType.ROCKETMQ
    data = encode_frame(cmd)
    expected_header = (
        struct.pack(">hbhii", 105, 0, 1, 7, 1)
        + struct.pack(">i", 1)
        + b"r"
        + struct.pack(">i", 2 + 1 + 4 + 2)
        + struct.pack(">h", 1)
        + b"k"
        + struct.pack(">i", 2)
        + b"vv"
    )
    assert data == frame_of(expected_header, serialize_type=1)


def test_json_header_accepts_numbers_booleans_and_nulls_in_ext_fields():
    header = {
        "code": 103,
        "language": "NODE_JS",
        "opaque": 3,
        "extFields": {"brokerId": 0, "ratio": 1.5, "flag": True, "gone": None, "s": "x"},
    }
    cmd = decode_frame(frame_of(json.dumps(header).encode()))
    assert cmd.ext_fields == {"brokerId": "0", "ratio": "1.5", "flag": "true", "s": "x"}
    assert cmd.language == LanguageCode.NODE_JS
    assert cmd.version == 0 and cmd.flag == 0 and cmd.remark == ""


def test_response_and_oneway_flags():
    req = RemotingCommand.request(105, {"topic": "t"}, oneway=True)
    assert req.is_oneway and not req.is_response and req.flag == RPC_ONEWAY
    resp = req.response(17, remark="no route")
    assert resp.is_response and resp.flag == RPC_TYPE_RESPONSE and resp.opaque == req.opaque
    assert RemotingCommand.request(105).opaque != RemotingCommand.request(105).opaque


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00", "no length field"),
        (struct.pack(">i", 2) + b"ab", "below the minimum"),
        (struct.pack(">i", -5), "below the minimum"),
        (struct.pack(">i", MAX_FRAME_BYTES + 1), "exceeds"),
        (struct.pack(">iI", 10, 3) + b"{}", "but 6 bytes follow"),
        (struct.pack(">iI", 6, 50) + b"{}", "header length 50 exceeds"),
        (frame_of(b"not json"), "header is not JSON"),
        (frame_of(b"\xff\xfe"), "header is not JSON"),
        (frame_of(b"[1, 2]"), "not a JSON object"),
        (frame_of(b"[" * 100_000), "nested too deeply"),
        (frame_of(b'{"opaque": 1}'), "'code' is not an integer"),
        (frame_of(b'{"code": "105"}'), "'code' is not an integer"),
        (frame_of(b'{"code": 1, "extFields": {"a": {"b": 1}}}'), "extFields"),
        (frame_of(b'{"code": 1, "extFields": []}'), "extFields is not a JSON object"),
        (frame_of(b"{}", serialize_type=7), "unknown serialize type 7"),
        (frame_of(b"\x00\x01", serialize_type=1), "truncated"),
        (
            frame_of(
                struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 99), serialize_type=1
            ),
            "remark length 99 overruns",
        ),
    ],
)
def test_malformed_frames_raise_frame_error(data: bytes, message: str):
    with pytest.raises(RemotingFrameError, match=message):
        decode_frame(data)


def test_every_truncation_of_a_binary_header_is_an_error():
    cmd = RemotingCommand(code=1, remark="remark", ext_fields={"a": "b", "cc": "dd"})
    cmd.serialize_type = SerializeType.ROCKETMQ
    data = encode_frame(cmd)
    header_len = struct.unpack_from(">I", data, 4)[0] & 0xFFFFFF
    header = data[8 : 8 + header_len]
    for cut in range(len(header)):
        with pytest.raises(RemotingFrameError):
            decode_payload(struct.pack(">I", (1 << 24) | cut) + header[:cut])


def test_encoding_an_oversize_frame_is_refused():
    with pytest.raises(RemotingFrameError, match="exceeds"):
        encode_frame(RemotingCommand(code=1, body=b"x" * MAX_FRAME_BYTES))


@pytest.mark.parametrize(
    "cmd",
    [
        RemotingCommand(code=200_050),  # a 5.x POP code: 16 bits in a binary header
        RemotingCommand(code=1, opaque=2**31),
        RemotingCommand(code=1, ext_fields={"k" * 40_000: "v"}),
    ],
)
def test_values_that_do_not_fit_a_binary_header_are_refused(cmd: RemotingCommand):
    cmd.serialize_type = SerializeType.ROCKETMQ
    with pytest.raises(RemotingFrameError, match="does not fit a binary header"):
        encode_frame(cmd)
    cmd.serialize_type = SerializeType.JSON
    assert decode_frame(encode_frame(cmd)) == cmd


@settings(max_examples=300, deadline=None)
@given(
    header=st.binary(max_size=64),
    body=st.binary(max_size=16),
    serialize_type=st.integers(0, 255),
    length_delta=st.integers(-8, 8),
)
def test_garbage_decodes_or_raises_frame_error_only(header, body, serialize_type, length_delta):
    data = bytearray(frame_of(header, body, serialize_type))
    struct.pack_into(">i", data, 0, len(data) - 4 + length_delta)
    try:
        cmd = decode_frame(bytes(data))
    except RemotingFrameError:
        return
    assert length_delta == 0 and cmd.body == body
