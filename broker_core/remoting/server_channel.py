"""``ServerChannel``: one accepted remoting connection, served on the server's event loop.

The asyncio protocol of :class:`~broker_core.remoting.server.RemotingServer`. Bytes arrive
on the loop thread (``data_received``) and are cut into frames there; a request whose code
is *inline* (cheap, never blocking: a send with async flush, a pull, a heartbeat) is
handled at once on the loop thread and its answer written straight to the transport, with
no thread hand-off. Any other request goes to the server's worker pool. A connection's
requests are handled in the order they arrived: once one is with a worker, every later
request of that connection queues behind it (the worker takes them one after the other)
until the queue is empty again. A request whose code is *concurrent* (a send that waits
for an fdatasync) goes to a worker of its own instead, unless the connection's queue is
busy: the sends that many threads of one client have in flight on its one connection
then wait together, and the store combines them into one put (``store/put_combiner.py``),
as RocketMQ's send thread pool serves one connection's sends concurrently.

The rest of the program sees the :class:`~broker_core.remoting.channel.Channel` API:
``send``, ``request`` and ``close`` from any thread (a write from another thread is handed
to the loop), ``peer``, ``id``, ``closed``.

A malformed frame, or a frame that has begun and does not complete within
``frame_timeout_s``, is answered with one ``SYSTEM_ERROR`` (opaque 0, the reason in
``remark``) and the connection closes. ``on_close`` runs once when it ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future
from typing import cast

from broker_core.errors import RemotingConnectError, RemotingFrameError
from broker_core.remoting.channel import Channel, RequestHandler, _format_addr, _ids
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RPC_TYPE_RESPONSE, RemotingCommand
from broker_core.remoting.frame import check_total_len, decode_payload, encode_frame

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
HIGH_WATER_BYTES = 8 << 20  # answers queued unsent beyond this: stop reading requests


class Served:
    """What a server gives each of its connections (shared, read-only)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        dispatch: RequestHandler,
        inline: Collection[int],
        concurrent: Collection[int],
        workers: Executor,
        max_frame_bytes: int,
        frame_timeout_s: float,
        on_end: Callable[[ServerChannel], None],
    ) -> None:
        self.loop = loop
        self.dispatch = dispatch
        self.inline = frozenset(inline)
        self.concurrent = frozenset(concurrent)
        self.workers = workers
        self.max_frame_bytes = max_frame_bytes
        self.frame_timeout_s = frame_timeout_s
        self.on_end = on_end
        self.thread_id = -1  # the loop's thread, set once it runs


class ServerChannel(Channel, asyncio.Protocol):
    """An accepted connection (see the module docstring)."""

    def __init__(self, served: Served) -> None:  # Channel.__init__ is for sockets: not called
        self.id = next(_ids)
        self.peer = "?"
        self._served = served
        self._loop = served.loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._stall: asyncio.TimerHandle | None = None
        self._pending: dict[int, Future[RemotingCommand]] = {}
        self._pending_lock = threading.Lock()
        self._closed = threading.Event()
        self._close_reason = ""
        self._ended = False
        self._queue: collections.deque[RemotingCommand] = collections.deque()
        self._queue_lock = threading.Lock()
        self._draining = False  # a worker holds this connection's queue

    # ---- the Channel API, any thread ---------------------------------------------------

    def send(self, cmd: RemotingCommand) -> None:
        """Write one command; raises ``RemotingConnectError`` if the connection is gone."""
        frame = encode_frame(cmd)
        if self.closed:
            raise RemotingConnectError(f"connection to {self.peer} is closed: {self._close_reason}")
        if self._on_loop():
            self._write(frame)
        else:
            self._loop.call_soon_threadsafe(self._write, frame)

    def run(self, on_request: RequestHandler) -> None:
        raise NotImplementedError("a server channel is read by its server's event loop")

    def close(self, reason: str = "closed locally") -> None:
        """Close the connection (unsent answers are flushed first); idempotent."""
        if not self._mark_closed(reason):
            return
        if self._on_loop():
            self._close_transport()
        else:
            self._loop.call_soon_threadsafe(self._close_transport)

    # ---- asyncio.Protocol, loop thread -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.peer = _format_addr(transport.get_extra_info("peername"))
        self._transport.set_write_buffer_limits(high=HIGH_WATER_BYTES)

    def connection_lost(self, exc: Exception | None) -> None:
        self._mark_closed(f"read failed: {exc}" if exc else "closed by peer")
        self._end()

    def pause_writing(self) -> None:  # the peer does not read its answers: stop reading
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        try:
            while len(buf) >= 4 and not self.closed:
                (total,) = _LENGTH.unpack_from(buf, 0)
                check_total_len(total, self._served.max_frame_bytes)
                if len(buf) < 4 + total:
                    break
                payload = bytes(buf[4 : 4 + total])
                del buf[: 4 + total]
                self._received(decode_payload(payload))
        except RemotingFrameError as exc:
            self._refuse_frame(str(exc))
            return
        self._watch_stall(bool(buf))

    def eof_received(self) -> bool | None:
        return None  # close the transport

    # ---- inside ------------------------------------------------------------------------

    def _on_loop(self) -> bool:
        return threading.get_ident() == self._served.thread_id

    def _received(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            self._complete(cmd)  # Channel's: the waiting request's future
            return
        served = self._served
        with self._queue_lock:
            alone = not self._draining and (
                cmd.code in served.inline or cmd.code in served.concurrent
            )
            if not alone:
                self._queue.append(cmd)
                start, self._draining = not self._draining, True
        if not alone:
            if start:
                served.workers.submit(self._drain)
        elif cmd.code in served.inline:
            self._handle(cmd)
        else:
            served.workers.submit(self._handle, cmd)

    def _drain(self) -> None:
        """On a worker: answer this connection's queued requests in order."""
        while True:
            with self._queue_lock:
                if not self._queue or self.closed:
                    self._queue.clear()
                    self._draining = False
                    return
                cmd = self._queue.popleft()
            self._handle(cmd)

    def _handle(self, cmd: RemotingCommand) -> None:
        response = self._served.dispatch(self, cmd)
        if response is None or cmd.is_oneway:
            return
        try:
            self.send(response)
        except RemotingFrameError as exc:  # our answer is too large: say so, keep the channel
            self.send(cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"answer not sent: {exc}"))
        except RemotingConnectError as exc:
            log.debug("%r: answer to %d not sent: %s", self, cmd.code, exc)

    def _write(self, frame: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame)

    def _watch_stall(self, partial: bool) -> None:
        """A begun frame's bytes must keep coming, each within ``frame_timeout_s`` of the
        last (a stuck peer must not hold a half frame for ever)."""
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if partial:
            timeout = self._served.frame_timeout_s
            self._stall = self._loop.call_later(
                timeout,
                self._refuse_frame,
                f"frame stalled: {len(self._buffer)} bytes of a frame, none more in {timeout} s",
            )

    def _refuse_frame(self, reason: str) -> None:
        log.warning("%r: malformed frame, closing: %s", self, reason)
        answer = RemotingCommand(
            code=ResponseCode.SYSTEM_ERROR,
            flag=RPC_TYPE_RESPONSE,
            remark=f"malformed frame: {reason}",
        )
        self._write(encode_frame(answer))
        self.close(f"malformed frame: {reason}")

    def _mark_closed(self, reason: str) -> bool:
        """Closed from now on; fail waiting requests. False if it was already closed."""
        with self._pending_lock:
            if self._closed.is_set():
                return False
            self._close_reason = reason
            self._closed.set()
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(RemotingConnectError(f"connection to {self.peer}: {reason}"))
        return True

    def _close_transport(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
        if self._transport is not None:
            self._transport.close()  # connection_lost follows once the answers are out
        else:
            self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._stall is not None:
            self._stall.cancel()
        with contextlib.suppress(Exception):
            self._served.on_end(self)
