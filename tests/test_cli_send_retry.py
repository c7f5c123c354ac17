"""``rmq send`` retries what is retriable, keeping the message id (issue 30, defect 3).

A loopback proxy between ``rmq send`` and a real broker plays a failover: it loses the
answer of the first request (forwards the request, waits until the broker has stored the
message, then cuts the connection) and refuses the next connection (the broker is still
unavailable at the first retry). The CLI retries with backoff, as the official clients do
(3 attempts), with the same message id, and the broker stores the message once. With two
quick attempts (the CLI before) the send failed.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from broker_core.errors import MessageNotFoundError
from tests.server.conftest import BrokerProcess, start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("send_retry"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


class AnswerLosingProxy:
    """Forwards connections to ``target``; on the first, once the client's bytes held
    ``marker`` (the request arrived), holds back the broker's answer until ``release``
    is set, then closes that connection; closes the second at once (refused)."""

    def __init__(self, target: tuple[str, int], marker: bytes) -> None:
        self.target, self.marker = target, marker
        self.request_seen = threading.Event()
        self.release = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.connections == 2:
                client.close()
                continue
            first = self.connections == 1
            server = socket.create_connection(self.target)
            threading.Thread(target=self._up, args=(client, server, first), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, first), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, first: bool) -> None:
        seen = b""
        while (data := _recv(client)) and _send(server, data):
            seen = (seen + data)[-4096:]
            if first and self.marker in seen:
                self.request_seen.set()
        server.close()

    def _down(self, server: socket.socket, client: socket.socket, first: bool) -> None:
        while data := _recv(server):
            if first and self.request_seen.is_set():
                self.release.wait()
                break  # the answer is lost
            if not _send(client, data):
                break
        client.close()
        server.close()

    def close(self) -> None:
        self.listener.close()


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def test_send_retries_a_lost_answer_and_the_message_is_stored_once(broker) -> None:
    key = f"retry-{uuid.uuid4().hex}"
    host, port = broker.endpoint.rsplit(":", 1)
    create = ["topic", "create", "retry_orders", "--endpoints", broker.endpoint]
    assert CliRunner().invoke(cli, create).exit_code == 0
    proxy = AnswerLosingProxy((host, int(port)), key.encode())
    result: dict[str, object] = {}

    def send() -> None:
        runner = CliRunner(env={"COLUMNS": "250"})
        argv = ["send", "retry_orders", "hello", "--keys", key]
        result["r"] = runner.invoke(
            cli, [*argv, "--endpoints", f"127.0.0.1:{proxy.port}"], catch_exceptions=False
        )

    sender = threading.Thread(target=send)
    sender.start()
    with RocketMQClient(broker.endpoint) as direct:
        assert proxy.request_seen.wait(60), "the send never reached the proxy"
        _await_stored(direct)
        proxy.release.set()  # now the first connection dies without its answer
        sender.join(60)
        proxy.close()
        r = result["r"]
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        assert proxy.connections >= 3  # a refused retry, then one that got through
        assert _stored(direct) == 1  # stored once: the retry kept the message id
        message_id = _indexed_id(direct, key)
        assert f"message id: {message_id}" in r.stdout  # type: ignore[attr-defined]


def _stored(client: RocketMQClient) -> int:
    """Messages in the test's topic (its queues' max offsets: dispatched at store time)."""
    return sum(row["max_offset"] for row in client.topic_status("retry_orders"))


def _await_stored(client: RocketMQClient) -> None:
    """Returns once the broker has stored the first attempt (awaits the store)."""
    for _ in range(600):
        if _stored(client):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the first attempt was never stored")


def _indexed_id(client: RocketMQClient, key: str) -> str:
    """The id of the message with ``key`` once the broker's index has it (awaited)."""
    for _ in range(600):
        try:
            return str(client.query_message(key=key, topic="retry_orders")[0]["message_id"])
        except (MessageNotFoundError, IndexError):  # not indexed yet
            threading.Event().wait(0.05)
    raise AssertionError("the message never reached the index")
