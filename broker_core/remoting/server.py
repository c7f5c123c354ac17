"""``RemotingServer``: a TCP server that dispatches remoting requests by code.

Threads: one accept thread, and one thread per connection running that connection's read
loop (:meth:`Channel.run`); a handler runs on its connection's thread, so requests of one
connection are handled in order and a slow handler delays only its own connection. A
handler must not wait on ``channel.request`` to the same connection (its response would
be read by the thread that is waiting).

Answers: an unknown code gets ``REQUEST_CODE_NOT_SUPPORTED`` (3); a handler that raises a
:class:`RocketMQError` gets ``SYSTEM_ERROR`` with the error text; any other exception is
logged with its traceback and answered ``SYSTEM_ERROR`` too: the connection and the server
live on. A malformed frame closes that connection only. ``on_close(channel)`` runs once
for every accepted connection when it ends (peer closed, killed, malformed frame, stop).
With ``ssl_context`` (see ``remoting/tls.py``) every connection does a TLS handshake first,
on its own thread: a plaintext or untrusted client is logged and dropped, the server lives on.

Example::

    server = RemotingServer("127.0.0.1:0", {105: lambda ch, req: req.response()})
    server.start()
    ...
    server.stop()
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable

from broker_core.errors import ConfigError, RocketMQError
from broker_core.remoting.channel import FRAME_TIMEOUT_S, Channel, RequestHandler
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.frame import MAX_FRAME_BYTES
from broker_core.remoting.tls import HANDSHAKE_TIMEOUT_S
from broker_core.remoting.tls_stream import TlsStream

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 0.2  # how often the accept loop looks at the stop flag


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
    ) -> None:
        self._ssl_context = ssl_context
        self._listen = parse_addr(listen)
        self._handlers: dict[int, RequestHandler] = dict(handlers or {})
        self._on_close = on_close
        self._max_frame_bytes = max_frame_bytes
        self._frame_timeout_s = frame_timeout_s
        self._sock: socket.socket | None = None
        self._channels: dict[int, Channel] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._accept_thread: threading.Thread | None = None
        self.address = ""

    def register(self, code: int, handler: RequestHandler) -> None:
        """Route requests with ``code`` to ``handler`` (replacing any earlier one)."""
        self._handlers[int(code)] = handler

    def start(self) -> str:
        """Bind and start accepting; returns the bound ``host:port`` (port 0 picks one)."""
        sock = socket.socket(socket.AF_INET6 if ":" in self._listen[0] else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(self._listen)
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.settimeout(ACCEPT_POLL_S)
        self._sock = sock
        host, port = sock.getsockname()[:2]
        self.address = f"{host}:{port}"
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="remoting-accept", daemon=True
        )
        self._accept_thread.start()
        return self.address

    def channels(self) -> list[Channel]:
        """The open connections (a snapshot), e.g. to push a request to a client."""
        with self._lock:
            return list(self._channels.values())

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, close every connection (their ``on_close`` runs), join threads."""
        self._stop.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout_s)
        if self._sock is not None:
            self._sock.close()
        for channel in self.channels():
            channel.close("server stopping")

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stop.is_set():
                    log.error("accept failed, no longer accepting: %s", exc)
                return
            self._serve_in_thread(conn)

    def _serve_in_thread(self, conn: socket.socket) -> None:
        name = f"remoting-conn-{conn.fileno()}"
        threading.Thread(target=self._open, args=(conn,), name=name, daemon=True).start()

    def _open(self, conn: socket.socket) -> None:
        """Handshake (with TLS), make the channel and serve it; a failed handshake closes."""
        try:
            stream: socket.socket | TlsStream = conn
            if self._ssl_context is not None:
                stream = TlsStream.accept(conn, self._ssl_context, timeout_s=HANDSHAKE_TIMEOUT_S)
            channel = Channel(
                stream, max_frame_bytes=self._max_frame_bytes, frame_timeout_s=self._frame_timeout_s
            )
        except (OSError, ValueError) as exc:  # peer gone, or TLS refused (SSLError is OSError)
            log.warning("connection refused before serving: %s", exc)
            conn.close()
            return
        with self._lock:
            self._channels[channel.id] = channel
        self._serve(channel)

    def _serve(self, channel: Channel) -> None:
        try:
            channel.run(self._dispatch)
        finally:
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
