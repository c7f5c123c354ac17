"""``Channel``: one remoting TCP connection, used by both the server and the client.

A channel owns a connected socket. One thread runs :meth:`Channel.run`, the read loop: a
response completes the request waiting on its ``opaque``; a request goes to the
``on_request`` callback, whose answer is sent back (not for oneway requests). Any thread
may call :meth:`send`, :meth:`request` and :meth:`close` (writes are serialised by a lock).
The socket is a plain ``socket.socket`` or a :class:`TlsStream` (never an ``ssl.SSLSocket``:
OpenSSL does not allow its concurrent read and write; ``remoting/tls_stream.py`` says how).

A malformed frame is answered, best effort, with one ``SYSTEM_ERROR`` response (opaque 0,
the reason in ``remark``) and then the channel closes: after a bad length the next frame
boundary is unknown. When the read loop ends, every request still waiting fails with
``RemotingConnectError``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from broker_core.errors import RemotingConnectError, RemotingFrameError, RemotingTimeoutError
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RPC_TYPE_RESPONSE, RemotingCommand
from broker_core.remoting.frame import MAX_FRAME_BYTES, encode_frame, read_frame
from broker_core.remoting.tls_stream import TlsStream

log = logging.getLogger(__name__)

RequestHandler = Callable[["Channel", RemotingCommand], "RemotingCommand | None"]
FRAME_TIMEOUT_S = 30.0  # a frame that has begun must complete within this

_ids = itertools.count(1)


class Channel:
    """A connected remoting socket: thread-safe writes, responses matched by ``opaque``."""

    def __init__(
        self,
        sock: socket.socket | TlsStream,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
    ) -> None:
        self.id = next(_ids)
        self._sock = sock
        self._sock.settimeout(frame_timeout_s)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = _format_addr(sock.getpeername())
        self._max_frame_bytes = max_frame_bytes
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future[RemotingCommand]] = {}
        self._pending_lock = threading.Lock()
        self._closed = threading.Event()
        self._close_reason = ""
        self._reader: threading.Thread | None = None  # the thread in run(), once it starts

    def __repr__(self) -> str:
        return f"Channel(#{self.id} {self.peer}{' closed' if self.closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def send(self, cmd: RemotingCommand) -> None:
        """Write one command; raises ``RemotingConnectError`` if the connection is gone."""
        frame = encode_frame(cmd)
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self._close_reason}")
        try:
            with self._write_lock:
                self._sock.sendall(frame)
        except OSError as exc:
            self.close(f"write failed: {exc}")
            raise RemotingConnectError(f"write to {self.peer} failed: {exc}") from None

    def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request and wait for its response (matched by ``cmd.opaque``)."""
        future: Future[RemotingCommand] = Future()
        with self._pending_lock:
            if self.closed:
                raise RemotingConnectError(f"connection to {self.peer} is closed")
            self._pending[cmd.opaque] = future
        try:
            self.send(cmd)
            return future.result(timeout_s)
        except FutureTimeout:
            raise RemotingTimeoutError(
                f"no response from {self.peer} to request code {cmd.code} in {timeout_s} s"
            ) from None
        finally:
            with self._pending_lock:
                self._pending.pop(cmd.opaque, None)

    def run(self, on_request: RequestHandler) -> None:
        """The read loop; returns when the connection closes (for whatever reason)."""
        self._reader = threading.current_thread()
        try:
            while not self.closed:
                cmd = read_frame(self._sock, self._max_frame_bytes)
                if cmd is None:
                    self.close("closed by peer")
                elif cmd.is_response:
                    self._complete(cmd)
                else:
                    self._answer(cmd, on_request)
        except RemotingFrameError as exc:
            self._reject_frame(exc)
        except (RemotingConnectError, OSError) as exc:
            self.close(f"read failed: {exc}")
        finally:
            self.close("read loop ended")
            with self._write_lock:  # no writer is inside the socket any more
                self._sock.close()

    def close(self, reason: str = "closed locally") -> None:
        """Shut the socket down and fail every waiting request; idempotent. While a read
        loop runs, the loop itself closes the file descriptor once it has left the socket:
        a TLS read in progress holds the raw descriptor number, and closing it under the
        read let that number be reused by a new socket whose first bytes the stale read
        then took (seen as an HTTP reply missing its first 5 bytes, a TLS record header)."""
        with self._pending_lock:
            if self._closed.is_set():
                return
            self._close_reason = reason
            self._closed.set()
            pending, self._pending = self._pending, {}
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._reader is None:  # no read loop: nobody else will close it
            self._sock.close()
        for future in pending.values():
            future.set_exception(RemotingConnectError(f"connection to {self.peer}: {reason}"))

    def _complete(self, cmd: RemotingCommand) -> None:
        with self._pending_lock:
            future = self._pending.pop(cmd.opaque, None)
        if future is None:
            log.debug("%r: response to unknown or expired opaque %d", self, cmd.opaque)
        else:
            future.set_result(cmd)

    def _answer(self, cmd: RemotingCommand, on_request: RequestHandler) -> None:
        response = on_request(self, cmd)
        if response is None or cmd.is_oneway:
            return
        try:
            self.send(response)
        except RemotingFrameError as exc:  # our answer is too large: say so, keep the channel
            self.send(cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"answer not sent: {exc}"))

    def _reject_frame(self, exc: RemotingFrameError) -> None:
        log.warning("%r: malformed frame, closing: %s", self, exc)
        answer = RemotingCommand(
            code=ResponseCode.SYSTEM_ERROR, flag=RPC_TYPE_RESPONSE, remark=f"malformed frame: {exc}"
        )
        with contextlib.suppress(RemotingConnectError):
            self.send(answer)
        self.close(f"malformed frame: {exc}")


def _format_addr(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)
