"""A queue that begins again on the master (topic deleted and made again) while a slave
keeps the old one: the slave's consume queue starts afresh from the replicated units, and
promotion takes the next offsets from it (``ConsumeQueue.restarted_by``, ``adopt_queues``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from broker_core.store.replica import stored_bytes
from tests.store.conftest import make_message

OpenStore = Callable[..., MessageStore]


def _bodies(store: MessageStore) -> list[bytes]:
    return [m.body for m in store.get_messages(QueueRead("orders", 0, 0, 100)).messages]


def test_slave_queue_begins_again_with_its_master(open_store: OpenStore, tmp_path: Path) -> None:
    master = open_store(tmp_path / "master")
    master.put_messages([make_message(i) for i in range(5)])
    first = stored_bytes(master.commitlog, 0, master.commitlog.max_offset)
    slave = open_store(tmp_path / "slave")
    assert slave.append_replica(0, first) == len(first)
    assert slave.wait_dispatched()
    slave.close()
    slave = open_store(tmp_path / "slave")  # recovery: queue orders:0 goes on at 5
    master.delete_topic("orders")
    again = master.put_messages([make_message(i) for i in range(100, 103)])
    assert [r.queue_offset for r in again] == [0, 1, 2]  # the master began the queue again
    rest = stored_bytes(master.commitlog, len(first), master.commitlog.max_offset)
    assert slave.append_replica(len(first), rest) == len(rest)
    assert slave.wait_dispatched()
    assert _bodies(slave) == _bodies(master) and len(_bodies(master)) == 3
    assert slave.adopt_replicated_queues() == {"orders": 1}
    (stored,) = slave.put_messages([make_message(200)])
    assert stored.queue_offset == 3  # after the master's 0..2, not after the old 0..4
    assert len(_bodies(slave)) == 4
