"""TlsStream: TLS remoting connections read on one thread and written from many, both ways,
over real loopback sockets with the throwaway CA (in process)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.auth.config import TlsConfig
from broker_core.auth.throwaway_ca import Pki, make_pki
from broker_core.errors import RemotingConnectError
from broker_core.remoting.channel import Channel
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.server import RemotingServer
from broker_core.remoting.tls import client_context, server_context
from broker_core.remoting.tls_stream import RAW_CHUNK_BYTES, TlsStream

ECHO, PUSHED = 1, 40


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("tls-stream-pki"))


@pytest.fixture()
def tls_server(pki: Pki) -> Iterator[tuple[RemotingServer, threading.Event]]:
    closed = threading.Event()
    context = server_context(TlsConfig(str(pki.server_cert), str(pki.server_key)))
    srv = RemotingServer(
        "127.0.0.1:0",
        {ECHO: _echo},
        on_close=lambda _ch: closed.set(),
        ssl_context=context,
        frame_timeout_s=2.0,
    )
    srv.start()
    yield srv, closed
    srv.stop()


def _echo(_ch: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.response(ext_fields=req.ext_fields, body=req.body)


def _body(i: int) -> bytes:
    """Sizes from empty to beyond one raw chunk, so some writes span several records."""
    size = (i * 7919) % (RAW_CHUNK_BYTES * 3 // 2) if i % 5 == 0 else i * 13
    return bytes([i % 251]) * size


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_both_sides_read_and_write_concurrently_over_one_tls_connection(
    pki: Pki, tls_server: tuple[RemotingServer, threading.Event], version: ssl.TLSVersion
) -> None:
    srv, _ = tls_server
    context = client_context(str(pki.ca))
    context.maximum_version = version
    client = RemotingClient(srv.address, timeout_s=10.0, ssl_context=context, on_request=_echo)
    try:
        assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS
        (channel,) = srv.channels()

        def call(i: int) -> tuple[int, RemotingCommand]:
            req = RemotingCommand.request(ECHO, {"i": str(i)}, body=_body(i))
            return i, client.invoke(req)

        def push(i: int) -> tuple[int, RemotingCommand]:  # server -> client, at the same time
            req = RemotingCommand.request(PUSHED, {"i": str(i)}, body=_body(i))
            return i, channel.request(req, timeout_s=10.0)

        with ThreadPoolExecutor(8) as pool:
            calls = pool.map(call, range(150))
            pushes = pool.map(push, range(150))
            results = [*calls, *pushes]
    finally:
        client.close()
    assert len(results) == 300
    for i, resp in results:
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields == {"i": str(i)} and resp.body == _body(i)


def test_a_forged_record_closes_only_that_connection(
    pki: Pki, tls_server: tuple[RemotingServer, threading.Event]
) -> None:
    srv, closed = tls_server
    host, port = srv.address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=5.0)
    try:
        TlsStream.connect(raw, client_context(str(pki.ca)), server_hostname=host, timeout_s=5.0)
        raw.sendall(b"\x17\x03\x03\x00\x20" + b"\x55" * 32)  # application data, bad MAC
        assert closed.wait(5.0), "the server kept a connection with a forged record"
    finally:
        raw.close()
    good = RemotingClient(srv.address, timeout_s=5.0, ssl_context=client_context(str(pki.ca)))
    try:
        assert good.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS
    finally:
        good.close()


def test_a_peer_that_closes_during_the_handshake_is_an_error(pki: Pki) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept_and_close() -> None:
            conn, _ = listener.accept()
            conn.recv(1)  # the ClientHello has begun
            conn.close()

        thread = threading.Thread(target=accept_and_close)
        thread.start()
        client = RemotingClient(
            f"127.0.0.1:{port}", timeout_s=5.0, ssl_context=client_context(str(pki.ca))
        )
        with pytest.raises(RemotingConnectError, match=r"TLS handshake with .* failed"):
            client.invoke(RemotingCommand.request(ECHO))
        thread.join(5.0)


def test_a_silent_peer_times_the_handshake_out(pki: Pki) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        client = RemotingClient(
            f"127.0.0.1:{port}", timeout_s=0.3, ssl_context=client_context(str(pki.ca))
        )
        with pytest.raises(RemotingConnectError, match=r"TLS handshake .*timed out"):
            client.invoke(RemotingCommand.request(ECHO))


def test_fresh_connections_each_get_their_first_answer(
    pki: Pki, tls_server: tuple[RemotingServer, threading.Event]
) -> None:
    """The first request races the reader thread's first read (TLS 1.3 session tickets):
    with a shared ``SSLSocket`` about one fresh connection in a few dozen never got its
    answer."""
    srv, _ = tls_server
    context = client_context(str(pki.ca))
    for i in range(150):
        client = RemotingClient(srv.address, timeout_s=5.0, ssl_context=context)
        try:
            resp = client.invoke(RemotingCommand.request(ECHO, {"i": str(i)}))
        finally:
            client.close()
        assert (resp.code, resp.ext_fields) == (ResponseCode.SUCCESS, {"i": str(i)})
