"""Remoting frames: length-prefixed commands on a TCP stream (RocketMQ's ``NettyDecoder``).

::

    offset  size  field
    0       4     total_len            int32 BE = 4 + header_len + body_len (excludes itself)
    4       4     header_len_and_type  int32 BE: high byte serialize type (0 JSON,
                                       1 ROCKETMQ), low 24 bits header_len
    8       H     header               see broker_core.remoting.headers
    8+H     B     body                 opaque bytes (JSON for name-server requests)

``total_len`` is at most ``MAX_FRAME_BYTES`` (16 MiB, RocketMQ's default). Anything that
breaks this layout raises :class:`RemotingFrameError`; the reader of a stream must then
close the connection, because the next frame boundary is unknown.

Example::

    data = encode_frame(RemotingCommand.request(105, {"topic": "t"}))
    assert decode_frame(data).ext_fields == {"topic": "t"}
"""

from __future__ import annotations

import struct
from typing import Protocol

from broker_core.errors import RemotingConnectError, RemotingFrameError
from broker_core.remoting.codes import SerializeType
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.headers import (
    decode_binary_header,
    decode_json_header,
    encode_binary_header,
    encode_json_header,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "PREFIX",
    "RemotingCommand",
    "RemotingFrameError",
    "decode_frame",
    "decode_payload",
    "encode_frame",
    "read_frame",
]

MAX_FRAME_BYTES = 16 << 20
PREFIX = struct.Struct(">iI")  # total_len, header_len_and_type
HEADER_LEN_MASK = 0xFFFFFF


def encode_frame(cmd: RemotingCommand, serialize_type: int | None = None) -> bytes:
    """The frame of ``cmd`` with its header in ``serialize_type`` (default: the command's).

    Raises ``RemotingFrameError`` if the frame would exceed the limits.
    """
    if serialize_type is None:
        serialize_type = cmd.serialize_type
    if serialize_type == SerializeType.JSON:
        header = encode_json_header(cmd)
    elif serialize_type == SerializeType.ROCKETMQ:
        header = encode_binary_header(cmd)
    else:
        raise RemotingFrameError(f"unknown serialize type {serialize_type}")
    if len(header) > HEADER_LEN_MASK:
        raise RemotingFrameError(f"header of {len(header)} bytes exceeds 16 MiB")
    total_len = 4 + len(header) + len(cmd.body)
    check_total_len(total_len)
    prefix = PREFIX.pack(total_len, (serialize_type << 24) | len(header))
    return b"".join([prefix, header, cmd.body])


def check_total_len(total_len: int, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
    if total_len < 4:
        raise RemotingFrameError(f"frame length {total_len} is below the minimum of 4")
    if total_len > max_frame_bytes:
        raise RemotingFrameError(f"frame length {total_len} exceeds {max_frame_bytes} bytes")


def decode_payload(payload: bytes) -> RemotingCommand:
    """Decode the ``total_len`` bytes that follow the length field."""
    if len(payload) < 4:
        raise RemotingFrameError(f"frame of {len(payload)} bytes has no header length")
    (len_and_type,) = struct.unpack_from(">I", payload, 0)
    serialize_type, header_len = len_and_type >> 24, len_and_type & HEADER_LEN_MASK
    if 4 + header_len > len(payload):
        raise RemotingFrameError(
            f"header length {header_len} exceeds the frame's {len(payload) - 4} bytes"
        )
    header, body = payload[4 : 4 + header_len], payload[4 + header_len :]
    if serialize_type == SerializeType.JSON:
        return decode_json_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        cmd = decode_binary_header(header, body)
        cmd.serialize_type = SerializeType.ROCKETMQ
        return cmd
    raise RemotingFrameError(f"unknown serialize type {serialize_type}")


def decode_frame(data: bytes, max_frame_bytes: int = MAX_FRAME_BYTES) -> RemotingCommand:
    """Decode one whole frame (length field included); extra or missing bytes are errors."""
    if len(data) < 4:
        raise RemotingFrameError(f"frame of {len(data)} bytes has no length field")
    (total_len,) = struct.unpack_from(">i", data, 0)
    check_total_len(total_len, max_frame_bytes)
    if total_len != len(data) - 4:
        raise RemotingFrameError(f"frame length {total_len} but {len(data) - 4} bytes follow")
    return decode_payload(data[4:])


class ByteSource(Protocol):
    """What frames are read from: a socket, or a ``TlsStream`` (same ``recv`` contract)."""

    def recv(self, bufsize: int, /) -> bytes: ...


def read_frame(sock: ByteSource, max_frame_bytes: int = MAX_FRAME_BYTES) -> RemotingCommand | None:
    """Read one frame from a socket; ``None`` on a clean close between frames.

    Between frames the read waits as long as it takes (a socket timeout there is retried);
    once a frame has begun, its bytes must keep arriving within the socket's timeout.
    Raises ``RemotingFrameError`` for a malformed or stalled frame and
    ``RemotingConnectError`` if the peer closes in the middle of one.
    """
    head = _recv_exact(sock, 4, at_boundary=True)
    if head is None:
        return None
    (total_len,) = struct.unpack(">i", head)
    check_total_len(total_len, max_frame_bytes)
    payload = _recv_exact(sock, total_len, at_boundary=False)
    assert payload is not None  # only at_boundary reads return None
    return decode_payload(payload)


def _recv_exact(sock: ByteSource, n: int, *, at_boundary: bool) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            if at_boundary and not buf:
                continue  # an idle connection between frames
            raise RemotingFrameError(f"frame stalled after {len(buf)} of {n} bytes") from None
        if not chunk:
            if at_boundary and not buf:
                return None
            raise RemotingConnectError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)
