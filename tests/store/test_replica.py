"""A slave's append of its master's bytes (``MessageStore.append_replica``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from broker_core.config import Role
from broker_core.errors import NotMasterError, ReplicationProtocolError
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from broker_core.store.replica import stored_bytes
from tests.store.conftest import make_message

OpenStore = Callable[..., MessageStore]


def master_log(store: MessageStore, count: int) -> bytes:
    """Fill ``store`` with ``count`` messages over three queues; its log from 0 to the end."""
    for start in range(0, count, 50):
        store.put_messages([make_message(i, queue_id=i % 3) for i in range(start, start + 50)])
    return stored_bytes(store.commitlog, 0, store.commitlog.max_offset)


def replay(slave: MessageStore, data: bytes, start: int, cuts: list[int]) -> None:
    """Feed ``data`` (placed at ``start``) in pieces ending at ``cuts``, as the HA link does."""
    pending, at = b"", start
    prev = 0
    for cut in [*cuts, len(data)]:
        pending += data[prev:cut]
        prev = cut
        done = slave.append_replica(at, pending)
        pending, at = pending[done:], at + done
    assert pending == b""


def test_bytes_cut_anywhere_land_at_the_same_offsets(open_store: OpenStore, tmp_path) -> None:
    master = open_store(tmp_path / "master")
    data = master_log(master, 400)
    assert len(master.commitlog.segments()) > 2  # crosses segments (and their blanks)
    slave = open_store(tmp_path / "slave")
    rng = random.Random(7)
    replay(slave, data, 0, sorted(rng.sample(range(1, len(data)), 300)))
    assert slave.commitlog.max_offset == master.commitlog.max_offset
    assert stored_bytes(slave.commitlog, 0, len(data)) == data
    assert slave.wait_dispatched()
    for qid in range(3):
        got = slave.get_messages(QueueRead("orders", qid, 0, 1000)).messages
        want = master.get_messages(QueueRead("orders", qid, 0, 1000)).messages
        assert [m.body for m in got] == [m.body for m in want] and len(got) > 100
    assert slave.query_by_key("key-17")[0].body == master.query_by_key("key-17")[0].body


def test_a_resent_identical_overlap_is_accepted(open_store: OpenStore, tmp_path) -> None:
    data = master_log(open_store(tmp_path / "master"), 100)
    slave = open_store(tmp_path / "slave")
    half = slave.append_replica(0, data[: len(data) // 2])
    assert slave.append_replica(0, data) == len(data)  # first half again, then the rest
    assert half > 0 and stored_bytes(slave.commitlog, 0, len(data)) == data


def test_an_overlap_that_differs_is_refused(open_store: OpenStore, tmp_path) -> None:
    data = master_log(open_store(tmp_path / "master"), 100)
    slave = open_store(tmp_path / "slave")
    end = slave.append_replica(0, data[:5000])
    changed = bytearray(data)
    changed[end - 10] ^= 0xFF
    with pytest.raises(ReplicationProtocolError, match="differ"):
        slave.append_replica(0, bytes(changed))
    assert slave.commitlog.max_offset == end


def test_a_gap_is_refused(open_store: OpenStore, tmp_path) -> None:
    data = master_log(open_store(tmp_path / "master"), 100)
    slave = open_store(tmp_path / "slave")
    end = slave.append_replica(0, data[:5000])
    with pytest.raises(ReplicationProtocolError, match="gap"):
        slave.append_replica(end + 200, data[end + 200 :])
    assert slave.commitlog.max_offset == end


@pytest.mark.parametrize("where", ["crc", "offset-field", "garbage"])
def test_a_unit_that_does_not_verify_stores_nothing_of_it(
    open_store: OpenStore, tmp_path, where: str
) -> None:
    master = open_store(tmp_path / "master")
    data = master_log(master, 100)
    size = int.from_bytes(data[:4], "big")
    bad = bytearray(data)
    if where == "crc":
        bad[size + 150] ^= 0x01  # a body byte of the second unit
    elif where == "offset-field":
        bad[size + 32 : size + 40] = (size + 8).to_bytes(8, "big")  # claims another position
    else:
        bad[size : size + 64] = bytes(random.Random(3).randbytes(64))
    slave = open_store(tmp_path / "slave")
    with pytest.raises(ReplicationProtocolError):
        slave.append_replica(0, bytes(bad))
    assert slave.commitlog.max_offset == size  # the first unit verified and stays


def test_an_empty_store_starts_at_the_masters_first_segment(
    open_store: OpenStore, tmp_path
) -> None:
    master = open_store(tmp_path / "master")
    data = master_log(master, 400)
    seg = master.commitlog.segment_size
    slave = open_store(tmp_path / "slave")
    with pytest.raises(ReplicationProtocolError):
        slave.append_replica(seg + 100, data[seg + 100 :])  # not a segment boundary
    assert slave.append_replica(seg, data[seg:]) == len(data) - seg
    assert slave.commitlog.min_offset == seg
    assert slave.wait_dispatched()
    got = slave.get_messages(QueueRead("orders", 0, slave.min_offset("orders", 0), 1000)).messages
    assert (
        got
        and got[-1].body
        == master.get_messages(QueueRead("orders", 0, master.max_offset("orders", 0) - 1, 1))
        .messages[0]
        .body
    )


def test_a_slave_store_refuses_client_writes(open_store: OpenStore) -> None:
    store = open_store()
    store.set_role(Role.SLAVE, "broker b is a slave")
    with pytest.raises(NotMasterError, match="broker b is a slave"):
        store.put_messages([make_message(1)])
