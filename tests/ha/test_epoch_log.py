"""The epoch file and the offline cut of a commitlog (``broker_core.ha.epoch_log``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.config import StoreConfig
from broker_core.errors import CorruptionError
from broker_core.ha import epoch_log
from broker_core.message import Message
from broker_core.store.atomic_file import read_json_atomic, write_json_atomic
from broker_core.store.message_store import MessageStore


def test_cut_at_is_the_start_of_the_first_epoch_the_store_does_not_know() -> None:
    history = [[1, 0], [2, 500], [3, 900]]
    assert epoch_log.cut_at(history, 1) == 500
    assert epoch_log.cut_at(history, 2) == 900
    assert epoch_log.cut_at(history, 3) is None
    assert epoch_log.cut_at(history, 0) == 0  # a store that never had an epoch


def test_epoch_file_round_trips_and_a_bad_crc_is_refused(tmp_path: Path) -> None:
    assert epoch_log.load_entries(tmp_path) == [] and epoch_log.last_epoch(tmp_path) == 0
    epoch_log.save_entries(tmp_path, [[1, 0], [2, 4096]])
    assert epoch_log.load_entries(tmp_path) == [[1, 0], [2, 4096]]
    assert epoch_log.last_epoch(tmp_path) == 2
    doc = read_json_atomic(tmp_path / epoch_log.EPOCH_FILE).data
    doc["entries"][1][1] = 4097  # entries that do not match their CRC
    write_json_atomic(tmp_path / epoch_log.EPOCH_FILE, doc)
    with pytest.raises(CorruptionError):
        epoch_log.load_entries(tmp_path)


def test_truncate_commitlog_cuts_at_a_unit_and_recovery_rebuilds_the_queues(
    tmp_path: Path,
) -> None:
    config = StoreConfig(store_dir=str(tmp_path), segment_size_bytes=16 << 20)
    store = MessageStore(config)
    store.open()
    puts = store.put_messages([Message("T", b"m-%d" % i, queue_id=0) for i in range(10)])
    store.close()
    cut = puts[6].physical_offset
    assert epoch_log.commitlog_end(tmp_path) == puts[-1].physical_offset + puts[-1].size
    dropped = epoch_log.truncate_commitlog(tmp_path, cut)
    assert dropped == sum(p.size for p in puts[6:])
    assert epoch_log.truncate_commitlog(tmp_path, cut) == 0  # nothing past it any more
    store = MessageStore(config)
    store.open()
    try:
        assert store.commitlog.max_offset == cut
        assert store.max_offset("T", 0) == 6
        again = store.put_messages([Message("T", b"after", queue_id=0)])
        assert again[0].physical_offset == cut and again[0].queue_offset == 6
    finally:
        store.close()
