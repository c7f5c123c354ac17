"""Transactions across broker restarts, and a ledger that never dies of its own invariant.

Issue 13, item 2: the ledger was rebuilt in the Broker's constructor, before the store
opened, so it saw empty half/op queues; after any restart the first EndTransaction hit
"half offset neither live nor finished" and every later one answered INTERNAL_ERROR.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.broker.broker import Broker
from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.pull import PullRequest
from broker_core.broker.system_topics import TRANS_HALF_TOPIC
from broker_core.broker.transaction.check import CheckRequest
from broker_core.broker.transaction.records import half_message
from broker_core.broker.transaction.transaction import TransactionService
from broker_core.config import BrokerConfig
from broker_core.errors import StoreClosedError
from broker_core.message import Message
from broker_core.store.message_store import MessageStore
from broker_core.store.queue_read import QueueRead
from tests.store.conftest import small_config

T0 = 1_800_000_000_000
TX = {"TRAN_MSG": "true"}


class Node:
    """A Broker on one store directory that can be restarted (cleanly) in place."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.now = T0
        self.asked: list[CheckRequest] = []
        self.broker = self._start()

    def _start(self) -> Broker:
        broker = Broker(
            BrokerConfig(default_queue_nums=1, transaction_check_timeout_ms=1_000),
            small_config(self.root / "store"),
            clock_ms=lambda: self.now,
        )
        broker.set_transaction_checker(self.asked.append)
        broker.start()
        return broker

    def restart(self) -> None:
        self.broker.stop()
        self.broker = self._start()

    def prepare(self, body: bytes) -> tuple[str, str]:
        sent = self.broker.sending.send(
            [Message("pay", body, properties=dict(TX))], producer_group="pg"
        )
        return sent[0].message_id, sent[0].transaction_id

    def delivered(self) -> list[bytes]:
        self.broker.store.wait_dispatched()
        return [
            m.body for m in self.broker.pulling.pull("g", PullRequest("pay", 0, 0, 100)).messages
        ]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.broker.stop()


def test_commits_go_on_after_a_restart(node: Node) -> None:
    for i in range(3):
        mid, tid = node.prepare(f"before-{i}".encode())
        node.broker.sending.end_transaction(mid, tid, commit=i != 1)
    node.restart()
    assert node.broker.transactions.stats().half_progress == 3
    mid, tid = node.prepare(b"after")
    node.broker.sending.end_transaction(mid, tid, commit=True)
    assert node.delivered() == [b"before-0", b"before-2", b"after"]
    assert node.broker.transactions.stats().half_progress == 4
    assert node.broker.service_health()["transaction-check"] == "ok"


def test_an_unresolved_half_survives_a_restart_and_is_delivered_once(node: Node) -> None:
    mid, tid = node.prepare(b"pending")
    node.restart()
    assert node.broker.transactions.stats().unresolved == 1
    node.now += 2_000
    node.broker.transactions.run_checks(node.now)
    assert [r.message_id for r in node.asked] == [mid]
    node.broker.sending.end_transaction(mid, tid, commit=True, from_check=True)
    with pytest.raises(Exception, match="already committed"):
        node.broker.sending.end_transaction(mid, tid, commit=True)
    node.restart()
    assert node.delivered() == [b"pending"]
    assert node.broker.transactions.stats().unresolved == 0


def test_service_needs_an_open_store(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    tx = TransactionService(store, ConsumerOffsetManager(tmp_path / "o.json"), lambda r: None)
    with pytest.raises(StoreClosedError, match="open"):
        tx.prepare(Message("pay", b"x"), "pg", "t1")
    with pytest.raises(StoreClosedError, match="open store"):
        tx.open()


def test_a_half_the_ledger_missed_is_read_back_not_asserted(node: Node) -> None:
    """A half appended without the ledger (a put that failed after its append, e.g. a sync
    flush timeout) is found from the log: progress moves past it and it can be ended."""
    store = node.broker.store
    orphan = store.put_message(half_message(Message("pay", b"orphan"), "pg", "tx-o", node.now))
    mid, tid = node.prepare(b"next")  # registered at the offset after the orphan
    node.broker.sending.end_transaction(mid, tid, commit=True)  # used to fail the assertion
    stats = node.broker.transactions.stats()
    assert stats.unresolved == 1 and stats.half_progress == orphan.queue_offset
    orphan_id = store.get_messages(QueueRead(TRANS_HALF_TOPIC, 0, orphan.queue_offset, 1)).messages[
        0
    ]
    node.broker.sending.end_transaction(orphan_id.message_id, "tx-o", commit=True)
    assert node.delivered() == [b"next", b"orphan"]
    assert node.broker.transactions.stats().half_progress == orphan.queue_offset + 2


def test_a_round_that_raises_does_not_end_check_backs(node: Node) -> None:
    tx = node.broker.transactions
    real_run_checks = tx.run_checks
    calls = 0
    second_round = threading.Event()

    def flaky(now_ms: int):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected: a bug in one round")
        if calls == 3:  # round 2 returned, so its success has been recorded
            second_round.set()
        return real_run_checks(now_ms)

    tx.stop()
    tx.run_checks = flaky  # type: ignore[method-assign]
    tx.thread.interval_ms = 20
    tx.start()
    assert second_round.wait(10), "the check thread died with the first round"
    assert tx.last_round_error is None  # cleared by the good round that followed
    assert tx.failure is None
    assert node.broker.service_health()["transaction-check"] == "ok"


def test_health_names_a_failed_round(node: Node) -> None:
    tx = node.broker.transactions
    tx.thread.last_error = RuntimeError("dispatch is behind")
    assert tx.last_round_error == "RuntimeError: dispatch is behind"
    health = node.broker.service_health()
    assert health["transaction-check"] == "error: RuntimeError: dispatch is behind"
    threads = {"dispatch", "commitlog-flush", "schedule-delivery", "timer-wheel"}
    assert threads | {"transaction-check", "pop-revive"} <= set(health)
