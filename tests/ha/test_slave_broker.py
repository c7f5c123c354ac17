"""A slave ``Broker`` in process: client writes and POP refused with one clear error before
anything is created; offset reads served; the services that append are not running."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.config import BrokerConfig, StoreConfig
from broker_core.errors import NotMasterError
from broker_core.message import Message
from broker_core.store.columns import ColumnBatch


def test_a_slave_refuses_writes_and_pop_but_serves_pulls(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(broker_name="s", broker_id=2, ha_master="127.0.0.1:1"),
                    StoreConfig(store_dir=str(tmp_path), segment_size_bytes=1 << 20,
                                max_body_bytes=1024))  # fmt: skip
    broker.start()
    try:
        refusals = [
            lambda: broker.send([Message("t-new", b"x")]),
            lambda: broker.send_columns(ColumnBatch.__new__(ColumnBatch)),
            lambda: broker.receive("GID", "t-new", max_count=1, invisible_ms=1000),
            lambda: broker.ack("GID", "t-new", "handle"),
        ]
        for refused in refusals:
            with pytest.raises(NotMasterError, match=r"broker s is a slave \(broker id 2\)"):
                refused()
        assert broker.topics.get("t-new") is None  # refused before auto-creation
        assert broker.store.commitlog.max_offset == 0
        assert broker.replication.status() == {
            "role": "slave", "broker_id": 2, "replication": "async", "master": "127.0.0.1:1",
            "connected": False, "last_error": broker.replication.status()["last_error"]}
        assert broker.schedule._thread is None and broker.timer._thread is None  # not started
    finally:
        broker.stop()
