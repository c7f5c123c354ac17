"""RemotingServer's inline requests: handled on the loop thread, yet in arrival order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from broker_core.remoting.channel import Channel
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting.server import RemotingServer

CHEAP, GATED = 1, 2


class Handlers:
    def __init__(self) -> None:
        self.threads: list[str] = []
        self.order: list[str] = []
        self.gate = threading.Event()
        self.gated_started = threading.Event()

    def cheap(self, _ch: Channel, req: RemotingCommand) -> RemotingCommand:
        self.threads.append(threading.current_thread().name)
        self.order.append(req.ext_fields["n"])
        return req.response(ext_fields={"n": req.ext_fields["n"]})

    def gated(self, _ch: Channel, req: RemotingCommand) -> RemotingCommand:
        self.threads.append(threading.current_thread().name)
        self.gated_started.set()
        assert self.gate.wait(10)
        self.order.append(req.ext_fields["n"])
        return req.response(ext_fields={"n": req.ext_fields["n"]})


@pytest.fixture()
def served() -> Iterator[tuple[RemotingServer, Handlers]]:
    h = Handlers()
    srv = RemotingServer("127.0.0.1:0", {CHEAP: h.cheap, GATED: h.gated}, inline={CHEAP})
    srv.start()
    yield srv, h
    h.gate.set()
    srv.stop()


def test_an_inline_request_is_handled_on_the_loop_thread(served) -> None:
    srv, h = served
    with_client = RemotingClient(srv.address, timeout_s=5)
    try:
        answer = with_client.invoke(RemotingCommand.request(CHEAP, {"n": "1"}))
        assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["n"] == "1"
        h.gate.set()
        assert with_client.invoke(RemotingCommand.request(GATED, {"n": "2"})).code == 0
    finally:
        with_client.close()
    assert h.threads[0] == "remoting-loop"
    assert h.threads[1].startswith("remoting-worker")


def test_requests_behind_a_worker_request_keep_their_order(served) -> None:
    """A cheap request read while an earlier one of its connection is with a worker waits
    for it; another connection's cheap request does not."""
    srv, h = served
    first, other = RemotingClient(srv.address, timeout_s=5), RemotingClient(srv.address)
    try:
        answers: list[RemotingCommand] = []
        slow = threading.Thread(
            target=lambda: answers.append(first.invoke(RemotingCommand.request(GATED, {"n": "a"})))
        )
        slow.start()
        assert h.gated_started.wait(5)
        behind = threading.Thread(
            target=lambda: answers.append(first.invoke(RemotingCommand.request(CHEAP, {"n": "b"})))
        )
        behind.start()
        # the other connection is served meanwhile, on the loop thread
        assert other.invoke(RemotingCommand.request(CHEAP, {"n": "c"})).ext_fields["n"] == "c"
        assert h.order == ["c"]
        h.gate.set()
        slow.join(5)
        behind.join(5)
        assert h.order == ["c", "a", "b"]  # b waited for a, its connection's earlier request
        assert sorted(a.ext_fields["n"] for a in answers) == ["a", "b"]
    finally:
        first.close()
        other.close()
