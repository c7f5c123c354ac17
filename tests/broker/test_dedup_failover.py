"""Idempotent sends across a failover: a slave that took its master's commitlog bytes and
is promoted answers a retry of a send the old master stored with the original result
(the window is rebuilt from the replicated log at promotion), and stores it once."""

from __future__ import annotations

from pathlib import Path

from broker_core.broker.broker import Broker
from broker_core.message import Message
from tests.broker.dedup_brokers import stored
from tests.ha.conftest import commitlog_bytes, master_and_slave  # noqa: F401


def msg(uid: str, **props: str) -> Message:
    return Message("fo", b"x", queue_id=-1, properties={"UNIQ_KEY": uid, **props})


def test_a_promoted_slave_answers_the_old_masters_sends(
    master_and_slave: tuple[Broker, Broker],  # noqa: F811
) -> None:
    master, slave = master_and_slave
    first = master.sending.send([msg("FO-1"), msg("FO-2")])
    half = master.sending.send([msg("FO-3", TRAN_MSG="true")], producer_group="pg")[0]
    end = master.store.commitlog.max_offset
    data = commitlog_bytes(Path(master.store.config.store_dir))[:end]
    assert slave.store.append_replica(0, data) == end  # what replication copies
    slave.update_topic(master.topics.require("fo"))  # and what the metadata copy brings
    slave.promote()  # the master is gone; its client retries at the new master
    assert slave.sending.send([msg("FO-2"), msg("FO-1")]) == first[::-1]
    assert slave.sending.send([msg("FO-3", TRAN_MSG="true")], producer_group="pg")[0] == half
    assert stored(slave, "fo") == ["FO-1", "FO-2"]
