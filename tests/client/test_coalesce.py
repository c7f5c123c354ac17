"""``RocketMQClient(coalesce=True)``: concurrent single sends share requests, against a broker.

To make coalescing certain rather than likely, the first request is held back (before it
goes to the broker) until every other thread's send waits in the coalescer; the next
request then carries all of them.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time
from typing import Any

import pytest

from broker_core import errors
from broker_core.client import BrokerUnavailableError, OutgoingMessage, RocketMQClient
from broker_core.client.coalesce import Coalescer, _Lane
from broker_core.client.model import SendReceipt
from tests.server.conftest import BrokerProcess

THREADS = 6


class _HeldFirst:
    """The real SendMessage multicallable; its first call waits until ``release()``
    says so. Counts calls and the messages-per-request it saw (by answer entries)."""

    def __init__(self, real: Any, release: Any) -> None:
        self.real, self.release = real, release
        self.calls = 0
        self.sizes: list[int] = []  # of the requests answered

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            deadline = time.monotonic() + 30
            while not self.release() and time.monotonic() < deadline:
                time.sleep(0.001)
        answer = self.real(*args, **kwargs)
        self.sizes.append(len(answer.entries))
        return answer


def _waiting(client: RocketMQClient, topic: str) -> int:
    assert client.coalescer is not None
    lane = client.coalescer._lanes.get(topic)
    return len(lane.waiting) if lane else 0


def _hold_first(client: RocketMQClient, topic: str, others: int) -> _HeldFirst:
    held = _HeldFirst(
        client.broker.transport.raw_method("SendMessage"), lambda: _waiting(client, topic) >= others
    )
    client.broker.transport.raw_methods["SendMessage"] = held
    return held


def _in_threads(count: int, work: Any) -> list[Any]:
    """``work(i)`` in ``count`` threads; each one's result or exception."""
    outcomes: list[Any] = [None] * count

    def run(i: int) -> None:
        try:
            outcomes[i] = work(i)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def test_concurrent_sends_share_a_request_and_each_gets_its_own_receipt(
    broker: BrokerProcess,
) -> None:
    with RocketMQClient(broker.endpoint, coalesce=True) as client:
        client.create_topic("coalesce", queues=1)
        held = _hold_first(client, "coalesce", THREADS - 1)
        receipts = _in_threads(THREADS, lambda i: client.send("coalesce", b"m%d" % i, tag=f"t{i}"))
        assert held.sizes == [1, THREADS - 1]  # the first alone, the rest in one request
        stored = {m.queue_offset: m for m in client.pull("GID_c", "coalesce", 0, 0, 50).messages}
        assert len(stored) == THREADS
        for i, receipt in enumerate(receipts):
            message = stored[receipt.offset]
            assert (message.body, message.tag) == (b"m%d" % i, f"t{i}")
            assert message.message_id == receipt.message_id


def test_each_thread_keeps_its_order_while_sends_coalesce(broker: BrokerProcess) -> None:
    each = 40
    with RocketMQClient(broker.endpoint, coalesce=True) as client:
        client.create_topic("coalesce-order", queues=1)
        counted = _hold_first(client, "coalesce-order", THREADS - 1)

        def sender(i: int) -> list[Any]:
            return [client.send("coalesce-order", b"%d:%d" % (i, n)) for n in range(each)]

        per_thread = _in_threads(THREADS, sender)
        assert len(counted.sizes) < THREADS * each and sum(counted.sizes) == THREADS * each
        messages = client.pull("GID_c", "coalesce-order", 0, 0, THREADS * each).messages
        bodies = [m.body.decode().split(":") for m in messages]
        for i, receipts in enumerate(per_thread):
            mine = [int(n) for t, n in bodies if t == str(i)]
            assert mine == list(range(each))  # stored in the order the thread sent them
            assert [r.offset for r in receipts] == sorted(r.offset for r in receipts)


def test_a_bad_message_fails_only_its_own_sender(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint, coalesce=True) as client:
        client.create_topic("coalesce-bad", queues=1)
        assert client.coalescer is not None
        client.coalescer.max_batch_bytes = 64 << 20  # the big message may share a request
        held = _hold_first(client, "coalesce-bad", THREADS - 1)
        big = b"x" * (5 << 20)
        outcomes = _in_threads(
            THREADS, lambda i: client.send("coalesce-bad", big if i == 3 else b"ok%d" % i)
        )
        # 1 alone, then the other 5: refused whole if the bad one is among them, and
        # then sent again one by one
        assert held.calls in (2, 2 + THREADS - 1)
        assert isinstance(outcomes[3], errors.MessageTooLargeError)
        good = [o for i, o in enumerate(outcomes) if i != 3]
        assert sorted(r.offset for r in good) == list(range(THREADS - 1))
        bodies = {m.body for m in client.pull("GID_c", "coalesce-bad", 0, 0, 50).messages}
        assert bodies == {b"ok%d" % i for i in range(THREADS) if i != 3}


def test_a_failed_request_fails_every_sender_in_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RocketMQClient(
        f"127.0.0.1:{port}", timeout_s=2, max_attempts=2, retry_backoff_s=0, coalesce=True
    )
    with client:
        outcomes = _in_threads(THREADS, lambda i: client.send("anything", b"%d" % i))
        assert all(isinstance(o, BrokerUnavailableError) for o in outcomes), outcomes
        assert len({id(o) for o in outcomes}) == THREADS  # each caller its own error
        assert len({str(o) for o in outcomes}) == 1
        assert client.coalescer is not None and not client.coalescer._lanes["anything"].busy


def test_a_pickled_coalescing_client_starts_with_an_empty_coalescer() -> None:
    client = RocketMQClient("127.0.0.1:1", coalesce=True)
    assert client.coalescer is not None
    client.coalescer._lanes["t"] = _Lane(busy=True)  # a request in flight here only
    copy = pickle.loads(pickle.dumps(client))
    assert isinstance(copy.coalescer, Coalescer) and copy.coalescer._lanes == {}
    assert RocketMQClient("127.0.0.1:1").coalescer is None


@pytest.mark.parametrize(
    ("max_batch", "max_bytes", "most"), [(1, 1 << 20, 1), (2, 1 << 20, 2), (9, 250, 2)]
)
def test_max_batch_bounds_the_messages_of_a_request(
    broker: BrokerProcess, max_batch: int, max_bytes: int, most: int
) -> None:
    with RocketMQClient(broker.endpoint, coalesce=True) as client:
        assert client.coalescer is not None
        client.coalescer.max_batch, client.coalescer.max_batch_bytes = max_batch, max_bytes
        topic = f"coalesce-max-{max_batch}-{max_bytes}"
        client.create_topic(topic, queues=1)
        held = _hold_first(client, topic, THREADS - 1)
        receipts = _in_threads(THREADS, lambda i: client.send(topic, b"%099d" % i))
        assert max(held.sizes) == most and sum(held.sizes) == THREADS
        assert sorted(r.offset for r in receipts) == list(range(THREADS))


def test_a_forked_copy_ignores_the_parents_request_in_flight() -> None:
    coalescer = Coalescer()
    coalescer._lanes["t"] = _Lane(busy=True, waiting=[])  # the parent's request in flight
    coalescer._lock.acquire()  # held by a parent thread at the fork
    coalescer._pid = -1  # as a forked child sees it
    sent: list[list[bytes]] = []

    def send_now(topic: str, messages: list[OutgoingMessage]) -> list[SendReceipt]:
        sent.append([m.body for m in messages])
        return [SendReceipt("id", 7, "", "")]

    receipt = coalescer.send("t", OutgoingMessage(b"child"), send_now)
    assert (receipt.offset, sent) == (7, [[b"child"]])
    assert not coalescer._lanes["t"].busy
