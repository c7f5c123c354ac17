"""The HA protocol's bytes (big-endian, plain TCP; RocketMQ's classic HAService shape).

Slave → master, a *report*: ``offset int64`` — the slave's commitlog end (every byte
below it is stored). Sent on connecting, after each stored batch and every heartbeat
interval. A first report of ``METADATA_REQUEST`` (-1) instead asks for the master's
config tables: one ``METADATA_OFFSET`` frame answers, then the master closes.

Master → slave, a *frame*: ``offset int64 | size int32 | body`` — ``size`` commitlog bytes
from global ``offset``; at most ``MAX_BATCH_BYTES``, never crossing a segment. ``size`` 0
is a heartbeat (``offset`` = where the stream continues).
"""

from __future__ import annotations

import socket
import struct

from broker_core.errors import ReplicationProtocolError

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")
MAX_BATCH_BYTES = 32 * 1024
METADATA_REQUEST = -1
METADATA_OFFSET = -1
MAX_METADATA_BYTES = 64 << 20


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


class FrameReader:
    """Cuts a byte stream into frames; survives socket timeouts without losing bytes."""

    def __init__(self, sock: socket.socket, max_body_bytes: int) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._max = max_body_bytes

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next whole frame, or None when the socket timed out first.

        Raises ConnectionError when the peer closed, ReplicationProtocolError for a
        header no master sends (negative size, a body over the limit).
        """
        while True:
            if len(self._buf) >= FRAME_HEADER.size:
                offset, size = FRAME_HEADER.unpack_from(self._buf)
                if size < 0 or size > self._max:
                    raise ReplicationProtocolError(f"bad HA frame: {size} bytes at {offset}")
                end = FRAME_HEADER.size + size
                if len(self._buf) >= end:
                    body = bytes(self._buf[FRAME_HEADER.size : end])
                    del self._buf[:end]
                    return offset, body
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                return None
            if not chunk:
                raise ConnectionError("the HA peer closed the connection")
            self._buf += chunk


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes; ConnectionError when the peer closes first (timeouts propagate)."""
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("the HA peer closed the connection")
        buf += chunk
    return bytes(buf)
