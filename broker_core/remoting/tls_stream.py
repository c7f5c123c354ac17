"""``TlsStream``: TLS over a plain blocking socket, safe for one reader and many writers.

Why not ``ssl.SSLSocket``: a remoting channel reads on one thread while other threads
write, and OpenSSL's ``SSL`` object must not be used by two threads at once (``SSL_read``
also writes: TLS 1.3 session tickets and key updates change the state ``SSL_write``
uses). Sharing an ``SSLSocket`` that way lost requests and broke handshakes now and then.

Here the ``SSL`` state is an ``ssl.SSLObject`` over two memory BIOs, and the network I/O
is done on the raw socket by this class:

* the reader (one thread, :meth:`recv`) waits on the raw socket *without any lock*, then
  feeds the ciphertext in and decrypts under ``_ssl_lock`` (memory work only, microseconds);
* a writer (:meth:`sendall`, any thread) holds ``_send_lock`` while it encrypts under
  ``_ssl_lock`` and sends the records;
* whatever ``SSL`` queues for the peer (application records, tickets, key updates, alerts)
  leaves only under ``_send_lock``, drained in order, so records never go out of order.

Lock order is always ``_send_lock`` then ``_ssl_lock``, and no lock is held while waiting
for the peer to send, so a blocked read never stalls a write. TLS renegotiation (TLS 1.2
only) is not supported: the contexts of ``remoting/tls.py`` refuse it, and a peer that
asks anyway gets the connection closed with an ``SSLError``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from typing import NamedTuple

RAW_CHUNK_BYTES = 256 << 10  # one raw read, and the plaintext encrypted under one lock hold


class TlsStream:
    """A TLS connection on ``sock``; create it with :meth:`connect` or :meth:`accept`.

    It offers the socket methods the remoting channel uses (``recv``, ``sendall``,
    ``settimeout``, ``setsockopt``, ``getpeername``, ``shutdown``, ``close``), with the
    raw socket's timeout on each network wait. Thread contract: one thread calls
    ``recv``; any thread calls ``sendall``, ``shutdown`` and ``close``.
    """

    def __init__(self, sock: socket.socket, sslobj: ssl.SSLObject, bios: _Bios) -> None:
        self._sock = sock
        self._sslobj = sslobj
        self._incoming, self._outgoing = bios
        self._ssl_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._plain = bytearray()  # decrypted, not yet returned by recv (reader only)
        self._eof = False  # the peer sent close_notify

    @classmethod
    def connect(
        cls,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_hostname: str | None,
        timeout_s: float,
    ) -> TlsStream:
        """Run the client handshake on the connected ``sock`` within ``timeout_s``.

        Raises ``ssl.SSLError`` (untrusted certificate, not TLS, ...) or ``OSError``
        (peer gone, timeout); the caller closes ``sock`` then."""
        bios = _Bios(ssl.MemoryBIO(), ssl.MemoryBIO())
        sslobj = context.wrap_bio(*bios, server_side=False, server_hostname=server_hostname)
        _handshake(sock, sslobj, bios, timeout_s)
        return cls(sock, sslobj, bios)

    @classmethod
    def accept(cls, sock: socket.socket, context: ssl.SSLContext, *, timeout_s: float) -> TlsStream:
        """Run the server handshake on the accepted ``sock`` within ``timeout_s``; raises
        like :meth:`connect` (a plaintext client or a missing client certificate)."""
        bios = _Bios(ssl.MemoryBIO(), ssl.MemoryBIO())
        sslobj = context.wrap_bio(*bios, server_side=True)
        _handshake(sock, sslobj, bios, timeout_s)
        return cls(sock, sslobj, bios)

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` plaintext bytes; ``b""`` when the peer has closed (with or
        without a TLS close_notify). Raises ``TimeoutError`` when the raw socket's timeout
        passes with no data (nothing is lost: a later call goes on), ``ssl.SSLError`` on a
        corrupt or forged record, ``OSError`` on a broken connection. One thread only."""
        while not self._plain and not self._eof:
            self._decrypt()
            if self._plain or self._eof:
                break
            raw = self._sock.recv(RAW_CHUNK_BYTES)
            if not raw:
                return b""
            with self._ssl_lock:
                self._incoming.write(raw)
        data = bytes(self._plain[:bufsize])
        del self._plain[:bufsize]
        return data

    def sendall(self, data: bytes) -> None:
        """Encrypt and send all of ``data``; ``ssl.SSLError``/``OSError`` if it cannot."""
        view = memoryview(data)
        with self._send_lock:
            while True:
                chunk, view = view[:RAW_CHUNK_BYTES], view[RAW_CHUNK_BYTES:]
                with self._ssl_lock:
                    _write_all(self._sslobj, chunk)
                    records = self._outgoing.read()
                self._sock.sendall(records)
                if not view:
                    return

    def settimeout(self, timeout_s: float | None) -> None:
        self._sock.settimeout(timeout_s)

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self._sock.setsockopt(level, option, value)

    def getpeername(self) -> object:
        return self._sock.getpeername()

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    def _decrypt(self) -> None:
        """Move every whole record fed in so far into ``_plain`` (one lock hold), note a
        close_notify in ``_eof``, and send what the records made TLS queue for the peer
        (e.g. our answer to a key update: it must go out in order). Reader thread only."""
        with self._ssl_lock:
            try:
                while chunk := self._sslobj.read(RAW_CHUNK_BYTES):
                    self._plain += chunk
                self._eof = True  # read() returns b"" only once the peer has closed
            except ssl.SSLWantReadError:
                pass  # the rest of a record has not arrived yet
            except ssl.SSLZeroReturnError:
                self._eof = True
            queued = self._outgoing.pending > 0
        if queued:
            self._flush()

    def _flush(self) -> None:
        with self._send_lock:
            with self._ssl_lock:
                records = self._outgoing.read()
            if records:
                self._sock.sendall(records)


class _Bios(NamedTuple):
    """The two memory BIOs of one connection."""

    incoming: ssl.MemoryBIO  # ciphertext from the peer
    outgoing: ssl.MemoryBIO  # ciphertext for the peer


def _handshake(sock: socket.socket, sslobj: ssl.SSLObject, bios: _Bios, timeout_s: float) -> None:
    """Drive ``do_handshake`` over ``sock`` until done; the alert of a failed handshake
    is sent, best effort, before the error propagates."""
    incoming, outgoing = bios
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sslobj.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError:
            _send_best_effort(sock, outgoing.read())
            raise
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        records = outgoing.read()
        if records:
            sock.sendall(records)
        if done:
            return
        raw = sock.recv(RAW_CHUNK_BYTES)
        if not raw:
            raise ssl.SSLEOFError("the peer closed the connection during the TLS handshake")
        incoming.write(raw)


def _write_all(sslobj: ssl.SSLObject, chunk: memoryview) -> None:
    while chunk:
        try:
            written = sslobj.write(chunk)
        except ssl.SSLWantReadError:  # only a renegotiation makes a write wait for the peer
            raise ssl.SSLError("the peer asked for a TLS renegotiation: not supported") from None
        chunk = chunk[written:]


def _send_best_effort(sock: socket.socket, records: bytes) -> None:
    if records:
        with contextlib.suppress(OSError):
            sock.sendall(records)
