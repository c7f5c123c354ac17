"""The store facade over real files: append, read, filter, query, restart."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_core.errors import (
    BusyError,
    InvalidOffsetError,
    MessageNotFoundError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from broker_core.message import Message, tag_hash
from broker_core.protocol import unit as layout
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import make_message, small_config

Open = Callable[..., MessageStore]


def put_many(store: MessageStore, count: int, queues: int = 2) -> None:
    store.put_messages([make_message(i, queue_id=i % queues) for i in range(count)])
    assert store.wait_dispatched()


def test_append_and_read_back_across_segments(open_store: Open) -> None:
    store = open_store()
    put_many(store, 300)
    assert len(store.commitlog.segments()) > 2
    assert (store.min_offset("orders", 0), store.max_offset("orders", 0)) == (0, 150)
    got = store.get_messages(QueueRead("orders", 1, 0, 500))
    assert [int(m.properties["n"]) for m in got.messages] == list(range(1, 300, 2))
    assert got.next_offset == 150 and got.max_offset == 150
    assert all(m.queue_id == 1 for m in got.messages)
    assert [m.queue_offset for m in got.messages] == list(range(150))


def test_read_at_max_is_empty_and_beyond_is_an_error(open_store: Open) -> None:
    store = open_store()
    put_many(store, 4)
    assert store.get_messages(QueueRead("orders", 0, 2, 10)).messages == []
    with pytest.raises(OffsetOutOfRangeError, match="max is 2"):
        store.get_messages(QueueRead("orders", 0, 3, 10))
    with pytest.raises(InvalidOffsetError):
        store.get_messages(QueueRead("orders", 0, -1, 10))
    for bad in ({"max_count": 0}, {"max_bytes": 0}, {"queue_id": -1}):
        with pytest.raises(InvalidOffsetError, match="bad read of orders"):
            QueueRead(**{"topic": "orders", "queue_id": 0, "offset": 0, "max_count": 1, **bad})
    assert store.get_messages(QueueRead("nosuch", 0, 0, 10)).messages == []


def test_tag_code_filter_and_message_filter(open_store: Open) -> None:
    store = open_store()
    put_many(store, 40, queues=1)
    even = tag_hash("even")
    got = store.get_messages(QueueRead("orders", 0, 0, 100, tag_filter=lambda code: code == even))
    assert [int(m.properties["n"]) for m in got.messages] == list(range(0, 40, 2))
    assert got.filtered == 20 and got.next_offset == 40
    got = store.get_messages(
        QueueRead("orders", 0, 0, 3, message_filter=lambda m: int(m.properties["n"]) > 30)
    )
    assert [int(m.properties["n"]) for m in got.messages] == [31, 32, 33]
    assert got.next_offset == 34


def test_max_bytes_limits_a_read_but_always_returns_one(open_store: Open) -> None:
    store = open_store()
    put_many(store, 10, queues=1)
    got = store.get_messages(QueueRead("orders", 0, 0, 10, max_bytes=1))
    assert len(got.messages) == 1 and got.next_offset == 1


def test_query_by_key_and_by_id(open_store: Open) -> None:
    store = open_store()
    put_many(store, 50)
    assert [m.properties["n"] for m in store.query_by_key("key-17")] == ["17"]
    assert store.query_by_key("key-17", topic="other") == []
    assert store.query_by_id("ID0000000023").properties["n"] == "23"
    offset_id = store.put_message(Message("orders", b"no-uniq-key")).offset_message_id
    assert store.query_by_id(offset_id).body == b"no-uniq-key"
    with pytest.raises(MessageNotFoundError):
        store.query_by_id("NOPE")


def test_a_query_by_topic_matches_what_topic_of_names(open_store: Open) -> None:
    store = open_store()
    held = Message("held", b"x", properties={"UNIQ_KEY": "H-1", "KEYS": "k", "FOR": "orders"})
    store.put_message(held)
    assert store.wait_dispatched()
    assert store.query_by_key("k", topic="orders") == []  # the store knows no holding
    for_topic = lambda m: m.properties.get("FOR", m.topic)  # noqa: E731
    assert [m.body for m in store.query_by_key("k", topic="orders", topic_of=for_topic)] == [b"x"]
    assert store.query_by_id("H-1", "orders", topic_of=for_topic).body == b"x"
    assert store.query_by_id("H-1", "held").body == b"x"  # its own topic always matches
    assert store.query_by_key("k", topic="payments", topic_of=for_topic) == []


def test_timestamp_lookup(tmp_path: Path) -> None:
    clock = [1_000_000]
    store = MessageStore(small_config(tmp_path), clock_ms=lambda: clock[0])
    store.open()
    try:
        for i in range(20):
            clock[0] = 1_000_000 + i * 1000
            store.put_message(make_message(i))
        assert store.wait_dispatched()
        assert store.offset_for_timestamp("orders", 0, 0) == 0
        assert store.offset_for_timestamp("orders", 0, 1_005_000) == 5
        assert store.offset_for_timestamp("orders", 0, 1_005_001) == 6
        assert store.offset_for_timestamp("orders", 0, 9_999_999) == 20
        assert store.store_timestamp_at("orders", 0, 7) == 1_007_000
    finally:
        store.close()


def test_bad_message_in_a_batch_writes_nothing(open_store: Open) -> None:
    store = open_store()
    with pytest.raises(MessageTooLargeError):
        store.put_messages([make_message(1), Message("orders", bytes(16 * 1024 + 1))])
    assert store.commitlog.max_offset == 0


def test_restart_keeps_offsets_and_continues_numbering(open_store: Open, tmp_path: Path) -> None:
    store = open_store()
    put_many(store, 30)
    store.close()
    store = open_store()
    assert store.recovery is not None and not store.recovery.abnormal_shutdown
    assert store.max_offset("orders", 0) == 15
    result = store.put_message(make_message(99, queue_id=0))
    assert result.queue_offset == 15
    assert store.query_by_key("key-3")[0].properties["n"] == "3"


def test_dispatch_listener_hears_new_max_offsets(open_store: Open) -> None:
    store = open_store()
    heard: list[tuple[str, int, int]] = []
    done = threading.Event()

    def listener(topic: str, queue_id: int, max_offset: int) -> None:
        heard.append((topic, queue_id, max_offset))
        if max_offset == 3:
            done.set()

    store.add_dispatch_listener(listener)
    store.put_messages([make_message(i) for i in range(3)])
    assert done.wait(5)
    assert heard[-1] == ("orders", 0, 3)


def test_flow_control_when_dispatch_falls_behind(open_store: Open) -> None:
    store = open_store(max_dispatch_lag_bytes=1)
    with store.dispatcher._lock:  # hold dispatch still
        store.put_message(make_message(1))
        with pytest.raises(BusyError, match="retry later"):
            store.put_message(make_message(2))
    assert store.wait_dispatched()
    store.put_message(make_message(3))


def test_transaction_prepared_units_stay_out_of_queues(open_store: Open) -> None:
    store = open_store()
    half = Message(
        "orders",
        b"half",
        sys_flag=layout.SYSFLAG_TRANSACTION_PREPARED,
        properties={"KEYS": "half-key"},
    )
    store.put_messages([half, make_message(1)])
    assert store.wait_dispatched()
    assert [m.body for m in store.get_messages(QueueRead("orders", 0, 0, 10)).messages] == [
        make_message(1).body
    ]
    assert store.query_by_key("half-key")[0].body == b"half"


def test_batches_spanning_segments_are_dispatched_whole(open_store: Open) -> None:
    for _round in range(5):  # the dispatcher may see a multi-segment append half done
        store = open_store(segment_size_bytes=32 * 1024)
        store.put_messages([make_message(i, queue_id=i % 4, size=500) for i in range(400)])
        assert store.wait_dispatched()
        assert [store.max_offset("orders", q) for q in range(4)] == [100] * 4
        for q in range(4):
            assert len(store.get_messages(QueueRead("orders", q, 0, 1000)).messages) == 100
        store.close()
        shutil.rmtree(store.config.store_dir)


def test_byte_limit_stops_a_read_midway_and_the_next_read_resumes(open_store: Open) -> None:
    store = open_store()
    store.put_messages([make_message(i, size=800) for i in range(10)])
    assert store.wait_dispatched()
    unit = store.get_messages(QueueRead("orders", 0, 0, 1)).total_bytes
    got = store.get_messages(QueueRead("orders", 0, 0, 10, max_bytes=unit * 3 + unit // 2))
    assert len(got.messages) == 3 and got.next_offset == 3
    rest = store.get_messages(QueueRead("orders", 0, got.next_offset, 10))
    assert [m.queue_offset for m in rest.messages] == list(range(3, 10))


def test_a_nearly_full_disk_refuses_appends_until_space_returns(open_store: Open) -> None:
    store = open_store()
    ratio = [0.99]
    store.disk_ratio = lambda: ratio[0]
    store._disk_checked_at = -1.0
    with pytest.raises(BusyError, match="disk is more than 95% full"):
        store.put_message(make_message(1))
    ratio[0] = 0.5
    store._disk_checked_at = -1.0
    assert store.put_message(make_message(2)).queue_offset == 0
