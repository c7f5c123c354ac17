"""Sync flush over remoting: the sends one client has in flight on its one connection wait
for the fdatasync together and are stored as one combined put, each answered alone.

The first commitlog fdatasync is held (``os.fdatasync`` wrapped for the commitlog's files
only) until the other sends have queued behind it: served one after the other per
connection, as the thread-per-connection server did, they never would.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig
from broker_core.remoting.client import RemotingClient
from broker_core.remoting.codes import RequestCode as RC
from broker_core.remoting.codes import ResponseCode
from broker_core.remoting.command import RemotingCommand
from broker_core.remoting_broker.frontend import RemotingFrontEnd
from tests.store.conftest import small_config

SENDERS = 8


class Held:
    """Once ``armed``, the next commitlog fdatasync waits until ``gate`` is set."""

    def __init__(self) -> None:
        self.armed = False
        self.taken = False
        self.gate = threading.Event()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    real, state = os.fdatasync, Held()

    def fdatasync(fd: int) -> None:
        if state.armed and not state.taken and "commitlog" in os.readlink(f"/proc/self/fd/{fd}"):
            state.taken = True
            state.gate.wait(20)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    yield state
    state.gate.set()


@pytest.fixture
def sync_front(tmp_path: Path) -> Iterator[RemotingFrontEnd]:
    store = small_config(tmp_path / "store", flush_mode="sync", segment_size_bytes=1 << 20)
    broker = Broker(BrokerConfig(default_queue_nums=2), store)
    broker.start()
    end = RemotingFrontEnd(broker, "127.0.0.1:0")
    end.start()
    yield end
    end.stop()
    broker.stop()


def send(client: RemotingClient, n: int) -> RemotingCommand:
    fields = {"a": "pg", "b": "orders", "e": "-1", "f": "0", "g": "0"}
    fields["i"] = f"UNIQ_KEY\x01S{n:010d}\x02"
    return client.invoke(RemotingCommand.request(RC.SEND_MESSAGE_V2, fields, b"m%d" % n), 20)


def test_sends_in_flight_on_one_connection_share_one_put(
    sync_front: RemotingFrontEnd, held: Held
) -> None:
    store = sync_front.ctx.broker.store
    client = RemotingClient(sync_front.address, 20.0)
    try:
        assert send(client, 0).code == ResponseCode.SUCCESS  # the topic is made
        held.armed = True
        answers: list[RemotingCommand] = []
        threads = [
            threading.Thread(target=lambda n=n: answers.append(send(client, n)))
            for n in range(1, SENDERS + 1)
        ]
        for t in threads:
            t.start()
        combiner = store._combiner  # single sends: put_messages, then one put_batch
        deadline = time.monotonic() + 20
        while combiner.queued < SENDERS - 1:  # all but the leader wait behind its sync
            assert time.monotonic() < deadline, f"only {combiner.queued} sends queued"
            time.sleep(0.005)
        batches_before = combiner.batches
        held.gate.set()
        for t in threads:
            t.join(20)
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * SENDERS
        offsets = sorted((a.ext_fields["queueId"], a.ext_fields["queueOffset"]) for a in answers)
        assert len(set(offsets)) == SENDERS  # each its own place
        assert combiner.batches - batches_before == 1  # the queued ones: one put
    finally:
        client.close()
