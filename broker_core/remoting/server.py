"""``RemotingServer``: a TCP server that dispatches remoting requests by code.

Threads: one event-loop thread (uvloop's loop where uvloop is installed, else asyncio's)
accepts, reads and writes every connection (:mod:`.server_channel`). A request whose code
is in ``inline`` — cheap handlers that never block — is handled on the loop thread as
soon as its frame is read and answered in the same turn: no thread hand-off per call
(what made a single send cost ~170 µs of broker CPU on the thread-per-connection
server). Every other request goes to a pool of worker threads (``max_workers``); a
connection's requests are still handled in arrival order (a request behind one that is
with a worker waits for it), so a slow handler delays only its own connection — but for
the codes in ``concurrent`` (sends that wait for an fdatasync), which run side by side
on workers so that they can share it. A handler must not wait on ``channel.request`` to
the same connection.

Answers: an unknown code gets ``REQUEST_CODE_NOT_SUPPORTED`` (3); a handler that raises a
:class:`RocketMQError` gets ``SYSTEM_ERROR`` with the error text; any other exception is
logged with its traceback and answered ``SYSTEM_ERROR`` too: the connection and the server
live on. A malformed frame closes that connection only. ``on_close(channel)`` runs once
for every accepted connection when it ends (peer closed, killed, malformed frame, stop).
With ``ssl_context`` (see ``remoting/tls.py``) every connection does a TLS handshake first
(asyncio's TLS, within ``HANDSHAKE_TIMEOUT_S``): a plaintext or untrusted client is
dropped, the server lives on.

Example::

    server = RemotingServer("127.0.0.1:0", {105: lambda ch, req: req.response()})
    server.start()
    ...
    server.stop()
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor

from broker_core.errors import ConfigError, RocketMQError
from broker_core.remoting.channel import FRAME_TIMEOUT_S, Channel, RequestHandler
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.frame import MAX_FRAME_BYTES
from broker_core.remoting.server_channel import Served, ServerChannel
from broker_core.remoting.tls import HANDSHAKE_TIMEOUT_S

log = logging.getLogger(__name__)

MAX_WORKERS = 256  # threads for the handlers that are not inline (made as needed)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where uvloop is installed (measured faster: bench/NOTES.md), else
    asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` -> ``("host", port)``; raises ``ConfigError`` naming the bad address."""
    host, sep, port_text = addr.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"bad address {addr!r}: expected HOST:PORT")
    return host.strip("[]"), int(port_text)


class RemotingServer:
    """Accepts remoting connections and answers their requests with registered handlers."""

    def __init__(
        self,
        listen: str,
        handlers: dict[int, RequestHandler] | None = None,
        *,
        on_close: Callable[[Channel], None] | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        frame_timeout_s: float = FRAME_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
        inline: Collection[int] = (),
        concurrent: Collection[int] = (),
        max_workers: int = MAX_WORKERS,
    ) -> None:
        self._ssl_context = ssl_context
        self._listen = parse_addr(listen)
        self._handlers: dict[int, RequestHandler] = dict(handlers or {})
        self._on_close = on_close
        self._max_frame_bytes = max_frame_bytes
        self._frame_timeout_s = frame_timeout_s
        self._inline = frozenset(inline)
        self._concurrent = frozenset(concurrent)
        self._max_workers = max_workers
        self._channels: dict[int, ServerChannel] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._workers: ThreadPoolExecutor | None = None
        self.address = ""

    def register(self, code: int, handler: RequestHandler) -> None:
        """Route requests with ``code`` to ``handler`` (replacing any earlier one)."""
        self._handlers[int(code)] = handler

    def start(self) -> str:
        """Bind and start serving; returns the bound ``host:port`` (port 0 picks one)."""
        loop = self._loop = new_event_loop()
        workers = self._workers = ThreadPoolExecutor(
            self._max_workers, thread_name_prefix="remoting-worker"
        )
        served = Served(
            loop,
            self._dispatch,
            self._inline,
            self._concurrent,
            workers,
            self._max_frame_bytes,
            self._frame_timeout_s,
            self._ended,
        )
        bound: Future[str] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(served, bound), name="remoting-loop", daemon=True
        )
        self._thread.start()
        try:
            self.address = bound.result(30)
        except BaseException:
            self._thread.join(5)
            workers.shutdown(wait=False)
            raise
        return self.address

    def channels(self) -> list[Channel]:
        """The open connections (a snapshot), e.g. to push a request to a client."""
        with self._lock:
            return list(self._channels.values())

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection (their ``on_close`` runs), join threads."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shut(), loop).result(timeout_s)
        except Exception as exc:  # a wedged loop: stop it anyway
            log.warning("remoting server did not shut down cleanly: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)

    def _run(self, served: Served, bound: Future[str]) -> None:
        loop = served.loop
        served.thread_id = threading.get_ident()
        asyncio.set_event_loop(loop)
        try:
            host, port = self._listen
            self._server = loop.run_until_complete(
                loop.create_server(
                    lambda: self._accepted(served),
                    host,
                    port,
                    ssl=self._ssl_context,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl_context else None,
                    reuse_address=True,
                    backlog=128,
                )
            )
        except BaseException as exc:
            bound.set_exception(exc)
            loop.close()
            return
        sock_host, sock_port = self._server.sockets[0].getsockname()[:2]
        bound.set_result(f"{sock_host}:{sock_port}")
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _accepted(self, served: Served) -> ServerChannel:
        channel = ServerChannel(served)
        with self._lock:
            self._channels[channel.id] = channel
        return channel

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        for channel in self.channels():
            channel.close("server stopping")
        for _ in range(3):  # let the closed transports report (connection_lost)
            await asyncio.sleep(0)
        for channel in self.channels():
            if isinstance(channel, ServerChannel):
                channel.connection_lost(None)  # runs on_close for the rest

    def _ended(self, channel: ServerChannel) -> None:
        with self._lock:
            self._channels.pop(channel.id, None)
        if self._on_close is not None:
            try:
                self._on_close(channel)
            except Exception:
                log.exception("on_close callback failed for %r", channel)

    def _dispatch(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(request.code)
        if handler is None:
            return request.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {request.code} is not supported",
            )
        try:
            return handler(channel, request)
        except RocketMQError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except Exception as exc:
            log.exception("handler for request code %d failed", request.code)
            return request.response(
                ResponseCode.SYSTEM_ERROR, remark=f"internal error: {type(exc).__name__}: {exc}"
            )
