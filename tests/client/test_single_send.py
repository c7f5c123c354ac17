"""``RocketMQClient.send``: one message, one blocking SendMessage call, against a broker.

The single send waits anyway, so it must not go through a grpc future (grpcio starts a
channel-spin thread per future call when nothing else is in flight). These tests check
what it stores, that it uses the blocking call, that it still queues behind requests in
flight, that threads may share it, and that failures are our errors.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from broker_core import errors
from broker_core.client import BrokerUnavailableError, RocketMQClient
from tests.server.conftest import BrokerProcess


class _Recording:
    """A real grpc multicallable that remembers how it was called."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.blocking = 0
        self.futures = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.blocking += 1
        return self.real(*args, **kwargs)

    def future(self, *args: Any, **kwargs: Any) -> Any:
        self.futures += 1
        return self.real.future(*args, **kwargs)


def _recorded(client: RocketMQClient) -> _Recording:
    recording = _Recording(client.broker.transport.raw_method("SendMessage"))
    client.broker.transport.raw_methods["SendMessage"] = recording
    return recording


def test_send_stores_the_message_with_one_blocking_call(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic("single", queues=1)
        calls = _recorded(client)
        first = client.send("single", b"one", tag="T", keys=["k1"], properties={"p": "v"})
        second = client.send("single", "two")
        assert (calls.blocking, calls.futures) == (2, 0)
        assert (first.offset, second.offset) == (0, 1)
        assert first.message_id and first.message_id != second.message_id
        got = client.pull("GID_single", "single", 0, 0, 10).messages
        assert [m.body for m in got] == [b"one", b"two"]
        assert (got[0].tag, got[0].keys, got[0].properties.get("p")) == ("T", ("k1",), "v")
        assert [m.message_id for m in got] == [first.message_id, second.message_id]


def test_send_waits_behind_requests_in_flight_keeping_group_order(
    broker: BrokerProcess,
) -> None:
    with RocketMQClient(broker.endpoint, max_in_flight=5) as client:
        client.create_topic("single-fifo", queues=1, message_type="FIFO")
        pending = [
            client.send_columns_async("single-fifo", [b"a%d" % n] * 20, message_groups=["g"] * 20)
            for n in range(4)
        ]
        last = client.send("single-fifo", b"last", message_group="g")
        assert all(p.done for p in pending) and not client.broker.producer.window.open
        assert last.offset == 80
        calls = _recorded(client)
        client.send("single-fifo", b"after", message_group="g")  # window empty: blocking
        assert (calls.blocking, calls.futures) == (1, 0)


def test_threads_may_share_a_client_for_single_sends(broker: BrokerProcess) -> None:
    threads_n, each = 8, 25
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic("single-threads", queues=1)
        receipts: list[list[Any]] = [[] for _ in range(threads_n)]

        def sender(i: int) -> None:
            for n in range(each):
                receipts[i].append(client.send("single-threads", b"%d-%d" % (i, n)))

        workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads_n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        offsets = [r.offset for rs in receipts for r in rs]
        assert sorted(offsets) == list(range(threads_n * each))
        for rs in receipts:  # one thread's sends are stored in the order it made them
            assert [r.offset for r in rs] == sorted(r.offset for r in rs)


def test_a_refused_send_raises_our_error_and_stores_nothing(broker: BrokerProcess) -> None:
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic("single-bad", queues=1)
        with pytest.raises(errors.MessageTooLargeError):
            client.send("single-bad", b"x" * (5 << 20))
        with pytest.raises(errors.InvalidTopicError):
            client.send("no spaces allowed", b"x")
        assert client.send("single-bad", b"ok").offset == 0


def test_a_send_to_an_unreachable_broker_raises_broker_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RocketMQClient(f"127.0.0.1:{port}", timeout_s=2, max_attempts=2, retry_backoff_s=0)
    with client, pytest.raises(BrokerUnavailableError):
        client.send("anything", b"x")
