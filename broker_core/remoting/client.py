"""``RemotingClient``: a blocking, thread-safe client for one remoting server.

The client keeps one persistent connection, opened on first use. Any number of threads may
call :meth:`invoke` at once: each request gets its own ``opaque`` and a reader thread hands
every response to the caller waiting for it. When the connection breaks, the waiting calls
fail with ``RemotingConnectError`` and the next call connects again (a request is never
re-sent by this class: the caller knows whether it is idempotent). Requests the server
pushes to us go to ``on_request``; without one they are answered
``REQUEST_CODE_NOT_SUPPORTED``.

Example::

    client = RemotingClient("127.0.0.1:9876", timeout_s=3.0)
    resp = client.invoke(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    client.close()
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import replace

from broker_core.auth.remoting_sign import signed_fields
from broker_core.errors import RemotingConnectError
from broker_core.remoting.channel import Channel, RequestHandler
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RPC_ONEWAY, RemotingCommand
from broker_core.remoting.server import parse_addr
from broker_core.remoting.tls_stream import TlsStream

# A TLS server closes a plaintext connection at once, and a plain server answers a TLS
# hello with bytes that are no TLS record: say which (the CLI's TLS: RMQ_CA_FILE/RMQ_TLS).
PLAIN_TO_TLS_HINT = "if the peer serves TLS, connect with TLS: RMQ_CA_FILE=ca.pem or RMQ_TLS=true"
_NOT_TLS = "WRONG_VERSION_NUMBER"


def _not_supported(_channel: Channel, request: RemotingCommand) -> RemotingCommand:
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        remark=f"client does not serve request code {request.code}",
    )


class RemotingClient:
    """One persistent connection to ``addr`` ("host:port"), reconnected on demand."""

    def __init__(
        self,
        addr: str,
        timeout_s: float = 3.0,
        *,
        on_request: RequestHandler | None = None,
        ssl_context: ssl.SSLContext | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        """``ssl_context`` (see ``remoting/tls.py``): connect with TLS, else plain TCP.
        ``credentials`` (access key, secret key): sign every request as a 4.x client
        with session credentials does (``auth/remoting_sign.py``)."""
        self._ssl_context = ssl_context
        self._credentials = credentials
        self.addr = addr
        self.timeout_s = timeout_s
        self._target = parse_addr(addr)
        self._on_request = on_request or _not_supported
        self._lock = threading.Lock()
        self._channel: Channel | None = None
        self._closed = False

    def invoke(self, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """Send a request and return its response (any response code; the caller judges).

        Raises ``RemotingConnectError`` (cannot connect / connection broke),
        ``RemotingTimeoutError`` (no answer in ``timeout_s``, default the client's).
        """
        cmd = self._signed(cmd)
        try:
            return self._connected().request(
                cmd, self.timeout_s if timeout_s is None else timeout_s
            )
        except RemotingConnectError as exc:
            if self._ssl_context is None and "closed by peer" in str(exc):
                raise RemotingConnectError(f"{exc} ({PLAIN_TO_TLS_HINT})") from None
            raise

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request flagged oneway; no response is expected or awaited."""
        if not cmd.is_oneway:
            cmd = replace(cmd, flag=cmd.flag | RPC_ONEWAY)
        self._connected().send(self._signed(cmd))

    @property
    def connected(self) -> bool:
        """True while a connection is open (it may still break at any moment)."""
        channel = self._channel
        return channel is not None and not channel.closed

    def close(self) -> None:
        """Close the connection; later calls raise ``RemotingConnectError``."""
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close("client closed")

    def _signed(self, cmd: RemotingCommand) -> RemotingCommand:
        if self._credentials is None:
            return cmd
        fields = signed_fields(cmd.ext_fields, cmd.body, *self._credentials)
        return replace(cmd, ext_fields=fields)

    def _connected(self) -> Channel:
        with self._lock:
            if self._closed:
                raise RemotingConnectError(f"client for {self.addr} is closed")
            if self._channel is None or self._channel.closed:
                self._channel = self._connect()
            return self._channel

    def _connect(self) -> Channel:
        try:
            sock = socket.create_connection(self._target, timeout=self.timeout_s)
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {self.addr}: {exc}") from None
        try:
            stream: socket.socket | TlsStream = sock
            if self._ssl_context is not None:
                stream = TlsStream.connect(
                    sock,
                    self._ssl_context,
                    server_hostname=self._target[0],
                    timeout_s=self.timeout_s,
                )
            channel = Channel(stream)
        except OSError as exc:  # ssl.SSLError included: untrusted certificate, not TLS, ...
            sock.close()
            what = "TLS handshake with" if self._ssl_context is not None else "connection to"
            hint = " (TLS mismatch: the peer does not serve TLS)" if _NOT_TLS in str(exc) else ""
            raise RemotingConnectError(f"{what} {self.addr} failed: {exc}{hint}") from None
        name = f"remoting-client-{self.addr}"
        threading.Thread(
            target=channel.run, args=(self._on_request,), name=name, daemon=True
        ).start()
        return channel
