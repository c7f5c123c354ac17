"""RemotingServer and RemotingClient over real loopback sockets (in process)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_core.errors import (
    InvalidArgumentError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from broker_core.remoting.channel import Channel
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import ResponseCode, SerializeType
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.frame import encode_frame, read_frame
from broker_core.remoting.server import RemotingServer

ECHO, SLOW, FAIL, BUG, ONEWAY = 1, 2, 3_000, 4_000, 5_000


class Recorder:
    def __init__(self) -> None:
        self.closed: list[Channel] = []
        self.oneway = threading.Event()
        self.slow_started = threading.Event()
        self.closed_event = threading.Event()

    def on_close(self, channel: Channel) -> None:
        self.closed.append(channel)
        self.closed_event.set()


def echo(_ch: Channel, req: RemotingCommand) -> RemotingCommand:
    return req.response(ext_fields=req.ext_fields, body=req.body)


def fail(_ch: Channel, _req: RemotingCommand) -> RemotingCommand:
    raise InvalidArgumentError("bad things asked")


def bug(_ch: Channel, _req: RemotingCommand) -> RemotingCommand:
    raise ZeroDivisionError("oops")


@pytest.fixture()
def server() -> Iterator[tuple[RemotingServer, Recorder]]:
    rec = Recorder()

    def oneway(_ch: Channel, _req: RemotingCommand) -> None:
        rec.oneway.set()

    def slow(_ch: Channel, req: RemotingCommand) -> RemotingCommand:
        rec.slow_started.set()
        time.sleep(float(req.ext_fields["sleep_s"]))
        return req.response()

    handlers = {ECHO: echo, SLOW: slow, FAIL: fail, BUG: bug, ONEWAY: oneway}
    srv = RemotingServer("127.0.0.1:0", handlers, on_close=rec.on_close, frame_timeout_s=1.0)
    srv.start()
    yield srv, rec
    srv.stop()


@pytest.fixture()
def client(server: tuple[RemotingServer, Recorder]) -> Iterator[RemotingClient]:
    c = RemotingClient(server[0].address, timeout_s=5.0)
    yield c
    c.close()


def test_many_threads_share_one_connection_and_get_their_own_answers(client: RemotingClient):
    def call(i: int) -> tuple[int, RemotingCommand]:
        req = RemotingCommand.request(ECHO, {"i": str(i)}, body=bytes([i % 256]) * i)
        if i % 2:
            req.serialize_type = SerializeType.ROCKETMQ
        return i, client.invoke(req)

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(400)))
    for i, resp in results:
        assert resp.code == ResponseCode.SUCCESS
        assert resp.ext_fields == {"i": str(i)} and resp.body == bytes([i % 256]) * i
        assert resp.serialize_type == (SerializeType.ROCKETMQ if i % 2 else SerializeType.JSON)


def test_unknown_code_and_failing_handlers_get_answers_and_the_connection_lives(client):
    resp = client.invoke(RemotingCommand.request(777))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "777" in resp.remark
    resp = client.invoke(RemotingCommand.request(FAIL))
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "bad things asked")
    resp = client.invoke(RemotingCommand.request(BUG))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "ZeroDivisionError: oops" in resp.remark
    assert client.invoke(RemotingCommand.request(ECHO, {"a": "b"})).ext_fields == {"a": "b"}


def test_oneway_requests_are_handled_without_an_answer(server, client):
    client.invoke_oneway(RemotingCommand.request(ONEWAY))
    assert server[1].oneway.wait(5)
    assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS


def test_timeout_then_the_connection_still_serves(client: RemotingClient):
    with pytest.raises(RemotingTimeoutError, match="no response"):
        client.invoke(RemotingCommand.request(SLOW, {"sleep_s": "0.5"}), timeout_s=0.1)
    assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS


def test_client_reconnects_after_the_server_drops_the_connection(server, client):
    srv, rec = server
    assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS
    for channel in srv.channels():
        channel.close("test drops it")
    assert rec.closed_event.wait(5)
    deadline = time.monotonic() + 5
    while client.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not client.connected
    assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS
    assert len(srv.channels()) == 1


def test_waiting_requests_fail_when_the_connection_breaks(server, client):
    _, rec = server
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.invoke(RemotingCommand.request(SLOW, {"sleep_s": "3"}))
        except RemotingConnectError as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    assert rec.slow_started.wait(5)  # the request is in flight
    client.close()
    thread.join(5)
    assert len(errors) == 1


def test_server_pushes_a_request_to_a_connected_client(server):
    srv, _ = server
    pushed = RemotingClient(
        srv.address, on_request=lambda ch, req: req.response(remark=f"got {req.code}")
    )
    try:
        pushed.invoke(RemotingCommand.request(ECHO))
        (channel,) = srv.channels()
        resp = channel.request(RemotingCommand.request(40, {"group": "g"}), timeout_s=5)
        assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "got 40")
    finally:
        pushed.close()


def test_malformed_frame_is_answered_then_closed_and_on_close_runs(server):
    srv, rec = server
    with socket.create_connection(("127.0.0.1", int(srv.address.split(":")[1]))) as sock:
        sock.sendall(b"\x00\x00\x00\x0a\x00\x00\x00\x06{code:")
        answer = read_frame(sock)
        assert answer is not None and answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark.startswith("malformed frame: header is not JSON")
        assert read_frame(sock) is None  # then the server closed it
    assert rec.closed_event.wait(5)


def test_a_stalled_frame_closes_only_that_connection(server, client):
    srv, rec = server
    with socket.create_connection(("127.0.0.1", int(srv.address.split(":")[1]))) as sock:
        frame = encode_frame(RemotingCommand.request(ECHO))
        sock.sendall(frame[:-3])  # never completes; frame_timeout_s is 1 s here
        assert client.invoke(RemotingCommand.request(ECHO)).code == ResponseCode.SUCCESS
        answer = read_frame(sock)
        assert answer is not None and "stalled" in answer.remark
    assert rec.closed_event.wait(5)


def test_connect_error_names_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connection refused
        with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
            RemotingClient(f"127.0.0.1:{port}", timeout_s=1).invoke(RemotingCommand.request(1))
