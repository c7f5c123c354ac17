"""Tests for transactional (half) messages: prepare, commit/rollback, check-back, restart."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_core.broker.offsets import ConsumerOffsetManager
from broker_core.broker.system_topics import (
    TRANS_CHECK_GROUP,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from broker_core.broker.transaction.check import (
    PROPERTY_CHECK_BASE_MS,
    PROPERTY_CHECK_IMMUNITY_S,
    CheckAction,
    HalfLedger,
    LiveHalf,
    check_due_ms,
    decide_check,
    live_half_from,
    op_message,
    parse_op_body,
    recheck_message,
)
from broker_core.broker.transaction.transaction import (
    CheckRequest,
    CheckRound,
    PrepareResult,
    Resolution,
    TransactionService,
    half_message,
    real_message,
)
from broker_core.errors import (
    InvalidArgumentError,
    InvalidGroupError,
    InvalidTopicError,
    MessageNotFoundError,
    StoreClosedError,
)
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_DELIVER_TIME_MS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    Message,
    StoredMessage,
)
from broker_core.protocol.unit import (
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NONE,
    SYSFLAG_TRANSACTION_PREPARED,
)
from broker_core.store.message_store import MessageStore
from tests.store.conftest import make_message, small_config

T0 = 1_700_000_000_000
TIMEOUT_MS = 6_000
GROUP = "pg-orders"
REAL = "orders"
TRANSACTION_PROPS = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_BASE_MS,
)


# --------------------------------------------------------------------------- harness


def read_queue(store: MessageStore, topic: str, queue_id: int = 0) -> list[StoredMessage]:
    assert store.wait_dispatched()
    out: list[StoredMessage] = []
    offset = store.min_offset(topic, queue_id)
    while offset < store.max_offset(topic, queue_id):
        got = store.get_messages(topic, queue_id, offset, 512)
        out.extend(got.messages)
        offset = got.next_offset
    return out


class Broker:
    """A real store, offset manager and transaction service over one directory."""

    def __init__(self, root: Path, **service_options: Any) -> None:
        self.root = root
        self.options = service_options
        self.now_ms = T0
        self.requests: list[CheckRequest] = []
        self.answer: Callable[[CheckRequest], None] | None = None
        self.open()

    def _checker(self, request: CheckRequest) -> None:
        self.requests.append(request)
        if self.answer is not None:
            self.answer(request)

    def open(self) -> None:
        self.store = MessageStore(small_config(self.root / "store"))
        self.store.open()
        self.offsets = ConsumerOffsetManager(self.root / "config" / "consumerOffset.json")
        self.tx = TransactionService(
            self.store, self.offsets, self._checker, clock_ms=lambda: self.now_ms, **self.options
        )
        self.tx.open()

    def close(self) -> None:
        self.tx.stop()
        self.store.close()

    def restart(self) -> None:
        self.close()
        self.open()

    def prepare(self, i: int, **kw: Any) -> PrepareResult:
        return self.tx.prepare(make_message(i, topic=REAL, **kw), GROUP, f"tx-{i}")

    def end(self, p: PrepareResult, resolution: Resolution, *, from_check: bool = False) -> None:
        self.tx.end(p.message_id, p.transaction_id, resolution, from_check=from_check)

    def checks(self, now_ms: int) -> CheckRound:
        self.now_ms = now_ms
        return self.tx.run_checks(now_ms)

    def real(self) -> list[StoredMessage]:
        return read_queue(self.store, REAL)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def stored(
    props: dict[str, str],
    *,
    topic: str = TRANS_HALF_TOPIC,
    queue_offset: int = 3,
    physical_offset: int = 4096,
    sys_flag: int = 0,
) -> StoredMessage:
    return StoredMessage(
        topic,
        0,
        queue_offset,
        physical_offset,
        b"body",
        props,
        7,
        sys_flag,
        T0 - 5,
        ("10.0.0.1", 5555),
        T0,
        ("127.0.0.1", 8081),
        2,
        0,
        0,
        100,
    )


def half_props(**extra: str) -> dict[str, str]:
    props = {
        PROPERTY_UNIQ_KEY: "ID1",
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_PRODUCER_GROUP: GROUP,
        PROPERTY_CHECK_BASE_MS: str(T0),
    }
    props.update(extra)
    return props


def live(offset: int, message_id: str = "", check_times: int = 0, due_ms: int = T0) -> LiveHalf:
    return LiveHalf(
        offset, offset * 100, message_id or f"ID{offset}", "tx", GROUP, check_times, due_ms
    )


# --------------------------------------------------------------------------- rewrites


def test_half_message_hides_the_real_destination() -> None:
    msg = make_message(1, topic=REAL, queue_id=3)
    msg.sys_flag = SYSFLAG_TRANSACTION_PREPARED
    original = dict(msg.properties)
    half = half_message(msg, GROUP, "tx-1", T0)
    assert (half.topic, half.queue_id, half.body) == (TRANS_HALF_TOPIC, 0, msg.body)
    assert half.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_NONE
    assert half.properties == original | {
        PROPERTY_REAL_TOPIC: REAL,
        PROPERTY_REAL_QUEUE_ID: "3",
        PROPERTY_TRANSACTION_PREPARED: "true",
        PROPERTY_PRODUCER_GROUP: GROUP,
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_CHECK_BASE_MS: str(T0),
    }
    assert msg.properties == original  # the input is not modified


def test_half_message_gives_an_id_when_missing() -> None:
    half = half_message(Message(REAL, b"x"), GROUP, "tx-1", T0)
    assert len(half.properties[PROPERTY_UNIQ_KEY]) == 34


@pytest.mark.parametrize(
    ("topic", "group", "tx_id", "queue_id", "error"),
    [
        ("bad topic", GROUP, "tx", 0, InvalidTopicError),
        (TRANS_HALF_TOPIC, GROUP, "tx", 0, InvalidTopicError),
        ("rmq_sys_anything", GROUP, "tx", 0, InvalidTopicError),
        (REAL, "", "tx", 0, InvalidGroupError),
        (REAL, "bad group", "tx", 0, InvalidGroupError),
        (REAL, GROUP, "", 0, InvalidArgumentError),
        (REAL, GROUP, "tx", -1, InvalidArgumentError),
    ],
)
def test_half_message_rejects(
    topic: str, group: str, tx_id: str, queue_id: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        half_message(Message(topic, b"x", queue_id=queue_id), group, tx_id, T0)


def test_real_message_restores_destination_and_user_properties() -> None:
    props = half_props(
        **{
            PROPERTY_REAL_TOPIC: REAL,
            PROPERTY_REAL_QUEUE_ID: "2",
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_CHECK_TIMES: "4",
            "TAGS": "t",
            "KEYS": "k1 k2",
            "user": "v",
            PROPERTY_DELIVER_TIME_MS: str(T0 + 60_000),
        }
    )
    msg = real_message(stored(props, physical_offset=8192))
    assert (msg.topic, msg.queue_id, msg.body, msg.flag) == (REAL, 2, b"body", 7)
    assert msg.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    assert msg.prepared_transaction_offset == 8192
    assert (msg.born_timestamp_ms, msg.born_host, msg.reconsume_times) == (
        T0 - 5,
        ("10.0.0.1", 5555),
        2,
    )
    assert msg.properties == {
        PROPERTY_UNIQ_KEY: "ID1",
        PROPERTY_TRANSACTION_ID: "tx-1",
        PROPERTY_PRODUCER_GROUP: GROUP,
        "TAGS": "t",
        "KEYS": "k1 k2",
        "user": "v",
        PROPERTY_DELIVER_TIME_MS: str(T0 + 60_000),
    }


@pytest.mark.parametrize(
    "missing",
    [
        {PROPERTY_REAL_QUEUE_ID: "0"},
        {PROPERTY_REAL_TOPIC: REAL},
        {PROPERTY_REAL_TOPIC: REAL, PROPERTY_REAL_QUEUE_ID: "x"},
    ],
)
def test_real_message_without_destination_raises(missing: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        real_message(stored(half_props(**missing)))


@pytest.mark.parametrize(("before", "after"), [(None, "1"), ("1", "2"), ("14", "15")])
def test_recheck_message_counts_checks(before: str | None, after: str) -> None:
    props = half_props() if before is None else half_props(**{PROPERTY_CHECK_TIMES: before})
    copy = recheck_message(stored(props), T0 + 99)
    assert (copy.topic, copy.queue_id, copy.body) == (TRANS_HALF_TOPIC, 0, b"body")
    assert copy.properties[PROPERTY_CHECK_TIMES] == after
    assert copy.properties[PROPERTY_CHECK_BASE_MS] == str(T0 + 99)


def test_op_message() -> None:
    op = op_message(42, T0)
    assert (op.topic, op.queue_id, op.body, op.tag) == (TRANS_OP_HALF_TOPIC, 0, b"42", "d")
    with pytest.raises(InvalidArgumentError):
        op_message(-1, T0)


@pytest.mark.parametrize(("body", "offsets"), [(b"0", [0]), (b"17", [17]), (b"3,4,9", [3, 4, 9])])
def test_parse_op_body(body: bytes, offsets: list[int]) -> None:
    assert parse_op_body(body) == offsets


@pytest.mark.parametrize("body", [b"", b"x", b"-1", b"1,", b"1,,2", b"1.5", b"\xff", b"\xd9\xa3"])
def test_parse_op_body_rejects(body: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_op_body(body)


# --------------------------------------------------------------------------- check policy


@pytest.mark.parametrize(
    ("extra", "due_ms"),
    [
        ({}, T0 + TIMEOUT_MS),
        ({PROPERTY_CHECK_IMMUNITY_S: "60"}, T0 + 60_000),
        ({PROPERTY_CHECK_IMMUNITY_S: "1"}, T0 + 1_000),
        ({PROPERTY_CHECK_IMMUNITY_S: "0"}, T0 + TIMEOUT_MS),
        ({PROPERTY_CHECK_IMMUNITY_S: "-5"}, T0 + TIMEOUT_MS),
        ({PROPERTY_CHECK_IMMUNITY_S: "soon"}, T0 + TIMEOUT_MS),
        ({PROPERTY_CHECK_IMMUNITY_S: "60", PROPERTY_CHECK_TIMES: "1"}, T0 + TIMEOUT_MS),
        ({PROPERTY_CHECK_TIMES: "3", PROPERTY_CHECK_BASE_MS: "500"}, 500 + TIMEOUT_MS),
    ],
)
def test_check_due_ms(extra: dict[str, str], due_ms: int) -> None:
    assert check_due_ms(half_props(**extra), TIMEOUT_MS) == due_ms


@pytest.mark.parametrize(
    ("now_ms", "check_times", "action"),
    [
        (T0 - 1, 0, CheckAction.WAIT),
        (T0 - 1, 15, CheckAction.WAIT),
        (T0, 0, CheckAction.CHECK),
        (T0 + 10**9, 14, CheckAction.CHECK),
        (T0, 15, CheckAction.ROLLBACK),
        (T0, 20, CheckAction.ROLLBACK),
    ],
)
def test_decide_check(now_ms: int, check_times: int, action: CheckAction) -> None:
    assert decide_check(live(0, check_times=check_times, due_ms=T0), now_ms, 15) is action


def test_live_half_from_reads_the_properties() -> None:
    half = live_half_from(half_props(**{PROPERTY_CHECK_TIMES: "2"}), 5, 600, TIMEOUT_MS)
    assert half == LiveHalf(5, 600, "ID1", "tx-1", GROUP, 2, T0 + TIMEOUT_MS)


@pytest.mark.parametrize(
    "broken",
    [
        {PROPERTY_UNIQ_KEY: ""},
        {PROPERTY_TRANSACTION_ID: ""},
        {PROPERTY_PRODUCER_GROUP: ""},
        {PROPERTY_CHECK_BASE_MS: "yesterday"},
        {PROPERTY_CHECK_TIMES: "many"},
        {PROPERTY_CHECK_TIMES: "-1"},
    ],
)
def test_live_half_from_rejects_malformed(broken: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        live_half_from(half_props(**broken), 0, 0, TIMEOUT_MS)


def test_ledger_advances_only_over_finished_halves() -> None:
    ledger = HalfLedger(half_progress=0, op_end=0)
    for offset in range(4):
        assert ledger.add_live(live(offset)) is None
    ledger.finish(1, op_offset=0)
    ledger.finish(3, op_offset=1)
    assert not ledger.advance()
    assert (ledger.half_progress, ledger.op_progress, ledger.finished_held) == (0, 0, 2)
    ledger.finish(0, op_offset=2)
    assert ledger.advance()
    assert (ledger.half_progress, ledger.op_progress, ledger.finished_held) == (2, 1, 1)
    ledger.finish(2, op_offset=3)
    ledger.advance()
    assert (ledger.half_progress, ledger.op_progress, ledger.finished_held) == (4, 4, 0)
    assert ledger.live_count == 0


def test_ledger_keeps_the_newest_copy_of_an_id() -> None:
    ledger = HalfLedger(0, 0)
    assert ledger.add_live(live(0, "A")) is None
    assert ledger.add_live(live(2, "A")) == live(0, "A")  # older returned for retirement
    assert ledger.add_live(live(1, "A")) == live(1, "A")  # an older one arriving late
    ledger.finish(0, 0)
    ledger.finish(1, 1)
    assert ledger.live_by_id("A") == live(2, "A")


def test_ledger_ignores_ops_below_progress() -> None:
    ledger = HalfLedger(half_progress=10, op_end=5)
    ledger.finish(3, op_offset=5)
    assert (ledger.finished_held, ledger.op_end, ledger.op_progress) == (0, 6, 6)
    ledger.finish(12, op_offset=6)
    assert (ledger.finished_held, ledger.op_progress) == (1, 6)


# --------------------------------------------------------------------------- end to end


def test_commit_delivers_exactly_once_with_properties_intact(broker: Broker) -> None:
    msg = make_message(1, topic=REAL, queue_id=0)
    msg.properties[PROPERTY_DELIVER_TIME_MS] = str(T0 + 1)
    p = broker.tx.prepare(msg, GROUP, "tx-1")
    assert p.message_id == "ID0000000001"
    result = broker.tx.end(p.message_id, "tx-1", Resolution.COMMIT, from_check=False)
    assert result.delivered is not None and result.delivered.message_id == p.message_id
    [got] = broker.real()
    assert (got.body, got.message_id, got.tag, got.keys) == (
        msg.body,
        p.message_id,
        "odd",
        ["key-1"],
    )
    assert got.properties["n"] == "1"
    assert got.properties[PROPERTY_DELIVER_TIME_MS] == str(T0 + 1)
    assert got.properties[PROPERTY_TRANSACTION_ID] == "tx-1"
    assert not set(TRANSACTION_PROPS) & set(got.properties)
    assert got.prepared_transaction_offset == p.physical_offset
    assert got.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert (op.body, op.tag) == (str(p.queue_offset).encode(), "d")


def test_half_is_invisible_in_the_real_topic_before_commit(broker: Broker) -> None:
    p = broker.prepare(1)
    assert broker.real() == []
    [half] = read_queue(broker.store, TRANS_HALF_TOPIC)
    assert (half.queue_offset, half.physical_offset) == (p.queue_offset, p.physical_offset)
    assert half.properties[PROPERTY_REAL_TOPIC] == REAL
    assert broker.store.query_by_id(p.message_id).topic == TRANS_HALF_TOPIC
    broker.end(p, Resolution.COMMIT)
    assert [m.message_id for m in broker.real()] == [p.message_id]


def test_rollback_delivers_nothing_and_records_the_op(broker: Broker) -> None:
    p = broker.prepare(1)
    result = broker.tx.end(p.message_id, p.transaction_id, Resolution.ROLLBACK, from_check=False)
    assert result.delivered is None
    assert broker.real() == []
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert (op.body, op.tag) == (str(p.queue_offset).encode(), "d")
    assert broker.tx.stats().unresolved == 0


@pytest.mark.parametrize("first", list(Resolution))
@pytest.mark.parametrize("second", list(Resolution))
def test_second_end_raises_and_delivers_nothing(
    broker: Broker, first: Resolution, second: Resolution
) -> None:
    p = broker.prepare(1)
    broker.end(p, first)
    with pytest.raises(MessageNotFoundError, match="already"):
        broker.end(p, second)
    assert len(broker.real()) == (1 if first is Resolution.COMMIT else 0)
    assert len(read_queue(broker.store, TRANS_OP_HALF_TOPIC)) == 1


def test_unknown_id_and_wrong_transaction_are_refused(broker: Broker) -> None:
    with pytest.raises(MessageNotFoundError, match="unknown"):
        broker.tx.end("NOPE", "tx-1", Resolution.COMMIT, from_check=False)
    p = broker.prepare(1)
    with pytest.raises(InvalidArgumentError, match="transaction"):
        broker.tx.end(p.message_id, "tx-other", Resolution.COMMIT, from_check=False)
    broker.end(p, Resolution.COMMIT)
    assert len(broker.real()) == 1


def test_bad_resolution_is_refused(broker: Broker) -> None:
    p = broker.prepare(1)
    with pytest.raises(InvalidArgumentError, match="resolution"):
        broker.tx.end(p.message_id, p.transaction_id, "maybe", from_check=False)  # type: ignore[arg-type]
    broker.end(p, Resolution("rollback"))
    assert broker.real() == []


def test_prepare_is_idempotent_for_the_same_id(broker: Broker) -> None:
    first = broker.prepare(1)
    assert broker.prepare(1) == first
    with pytest.raises(InvalidArgumentError):
        broker.tx.prepare(make_message(1, topic=REAL), GROUP, "tx-other")
    assert len(read_queue(broker.store, TRANS_HALF_TOPIC)) == 1
    broker.end(first, Resolution.COMMIT)
    second = broker.prepare(1)  # a reused id after the end is a new transaction
    assert second.queue_offset == first.queue_offset + 1


def test_failed_end_leaves_the_half_unresolved(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = b.prepare(1)
    b.store.close()  # every write now fails
    with pytest.raises(StoreClosedError):
        b.end(p, Resolution.ROLLBACK)
    assert b.tx.stats().unresolved == 1
    b.open()
    b.end(p, Resolution.COMMIT)
    assert [m.message_id for m in b.real()] == [p.message_id]
    b.close()


# --------------------------------------------------------------------------- check-back


def test_check_back_after_the_timeout_and_commit_from_check(broker: Broker) -> None:
    p = broker.prepare(1)
    assert broker.checks(T0 + TIMEOUT_MS - 1).checked == []
    round_ = broker.checks(T0 + TIMEOUT_MS)
    [request] = round_.checked
    assert broker.requests == [request]
    assert (
        request.producer_group,
        request.transaction_id,
        request.message_id,
        request.check_times,
    ) == (GROUP, "tx-1", p.message_id, 1)
    assert request.half.topic == TRANS_HALF_TOPIC
    assert request.half.properties[PROPERTY_CHECK_TIMES] == "1"
    assert broker.real() == []
    result = broker.tx.end(
        request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True
    )
    assert result.from_check
    [got] = broker.real()
    assert got.message_id == p.message_id and PROPERTY_CHECK_TIMES not in got.properties
    assert broker.checks(T0 + 100 * TIMEOUT_MS).checked == []


def test_checker_may_answer_inline(broker: Broker) -> None:
    def commit(request: CheckRequest) -> None:
        broker.tx.end(
            request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True
        )

    broker.answer = commit
    p = [broker.prepare(i) for i in range(3)]
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert [r.message_id for r in round_.checked] == [x.message_id for x in p]
    assert sorted(m.message_id for m in broker.real()) == [x.message_id for x in p]
    assert broker.tx.stats().unresolved == 0


def test_immunity_property_delays_the_first_check(broker: Broker) -> None:
    msg = make_message(1, topic=REAL)
    msg.properties[PROPERTY_CHECK_IMMUNITY_S] = "60"
    broker.tx.prepare(msg, GROUP, "tx-1")
    assert broker.checks(T0 + 59_999).checked == []
    assert len(broker.checks(T0 + 60_000).checked) == 1
    assert broker.checks(T0 + 60_000 + TIMEOUT_MS - 1).checked == []
    assert len(broker.checks(T0 + 60_000 + TIMEOUT_MS).checked) == 1


def test_unanswered_checks_retry_then_roll_back(broker: Broker) -> None:
    p = broker.prepare(1)
    now = T0
    for n in range(1, 16):
        now += TIMEOUT_MS
        [request] = broker.checks(now).checked
        assert request.check_times == n
        assert request.half.properties[PROPERTY_CHECK_TIMES] == str(n)
    now += TIMEOUT_MS
    round_ = broker.checks(now)
    assert (round_.checked, round_.rolled_back) == ([], [p.message_id])
    assert broker.real() == []
    with pytest.raises(MessageNotFoundError, match="rolled back"):
        broker.end(p, Resolution.COMMIT)
    assert broker.checks(now + 100 * TIMEOUT_MS) == CheckRound([], [], [], round_.half_progress)
    assert round_.half_progress == broker.store.max_offset(TRANS_HALF_TOPIC, 0) == 16


def test_max_check_times_is_configurable(tmp_path: Path) -> None:
    b = Broker(tmp_path, max_check_times=2, check_timeout_ms=1_000)
    p = b.prepare(1)
    assert len(b.checks(T0 + 1_000).checked) == 1
    assert len(b.checks(T0 + 2_000).checked) == 1
    assert b.checks(T0 + 3_000).rolled_back == [p.message_id]
    b.close()


def test_checker_error_is_reported_and_retried(broker: Broker) -> None:
    def offline(request: CheckRequest) -> None:
        raise MessageNotFoundError(f"no producer of {request.producer_group} online")

    broker.answer = offline
    p = broker.prepare(1)
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert round_.failed == [p.message_id]
    broker.answer = None
    assert [r.check_times for r in broker.checks(T0 + 2 * TIMEOUT_MS).checked] == [2]


def test_progress_only_passes_finished_halves(broker: Broker) -> None:
    p = [broker.prepare(i) for i in range(4)]

    def progress() -> int | None:
        return broker.offsets.query(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0)

    broker.end(p[1], Resolution.COMMIT)
    broker.end(p[3], Resolution.ROLLBACK)
    assert progress() == 0
    broker.end(p[0], Resolution.COMMIT)
    assert progress() == 2
    round_ = broker.checks(T0 + TIMEOUT_MS)  # p[2] re-put at offset 4: the original is finished
    assert [r.half.queue_offset for r in round_.checked] == [4]
    assert progress() == round_.half_progress == 4
    broker.end(p[2], Resolution.COMMIT)
    assert progress() == 5


# --------------------------------------------------------------------------- restart


def test_restart_mid_flow_loses_and_duplicates_nothing(broker: Broker) -> None:
    p = [broker.prepare(i) for i in range(6)]
    broker.end(p[0], Resolution.COMMIT)
    broker.end(p[1], Resolution.ROLLBACK)
    round_ = broker.checks(T0 + TIMEOUT_MS)
    assert [r.message_id for r in round_.checked] == [x.message_id for x in p[2:]]
    broker.end(p[3], Resolution.COMMIT, from_check=True)

    broker.restart()
    assert broker.tx.stats().unresolved == 3
    with pytest.raises(MessageNotFoundError):
        broker.end(p[0], Resolution.COMMIT)  # committed before the restart
    broker.end(p[2], Resolution.COMMIT)  # still committable after the restart
    broker.requests.clear()
    assert broker.checks(T0 + 2 * TIMEOUT_MS - 1).checked == []
    round_ = broker.checks(T0 + 2 * TIMEOUT_MS)
    assert [(r.message_id, r.check_times) for r in round_.checked] == [
        (p[4].message_id, 2),
        (p[5].message_id, 2),
    ]
    broker.end(p[4], Resolution.COMMIT, from_check=True)
    broker.end(p[5], Resolution.ROLLBACK, from_check=True)

    broker.restart()
    assert broker.checks(T0 + 1000 * TIMEOUT_MS) == CheckRound(
        [], [], [], broker.tx.stats().half_progress
    )
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held) == (0, 0)
    assert stats.half_progress == broker.store.max_offset(TRANS_HALF_TOPIC, 0)
    delivered = Counter(m.message_id for m in broker.real())
    assert delivered == Counter(p[i].message_id for i in (0, 3, 2, 4))


def test_restart_without_persisted_progress_rederives_everything(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    p = [b.prepare(i) for i in range(3)]
    b.end(p[0], Resolution.COMMIT)
    b.end(p[1], Resolution.ROLLBACK)
    b.store.close()  # the service is never stopped: no progress file
    assert not (tmp_path / "config" / "consumerOffset.json").exists()
    b.open()
    assert b.tx.stats().unresolved == 1
    [request] = b.checks(T0 + TIMEOUT_MS).checked
    assert request.message_id == p[2].message_id
    b.end(p[2], Resolution.COMMIT, from_check=True)
    assert sorted(m.message_id for m in b.real()) == [p[0].message_id, p[2].message_id]
    b.close()


def test_recovery_retires_a_copy_left_by_a_torn_recheck(broker: Broker) -> None:
    p = broker.prepare(1)
    [half] = read_queue(broker.store, TRANS_HALF_TOPIC)
    broker.store.put_message(recheck_message(half, T0 + 10))  # the copy; its op record is lost
    broker.restart()
    assert broker.tx.stats().unresolved == 1
    [op] = read_queue(broker.store, TRANS_OP_HALF_TOPIC)
    assert op.body == str(p.queue_offset).encode()
    [request] = broker.checks(T0 + 10 + TIMEOUT_MS).checked
    assert request.check_times == 2
    broker.end(p, Resolution.COMMIT, from_check=True)
    assert [m.message_id for m in broker.real()] == [p.message_id]
    assert broker.checks(T0 + 1000 * TIMEOUT_MS).checked == []


def test_recovery_rolls_back_a_malformed_half(broker: Broker) -> None:
    broker.store.put_message(Message(TRANS_HALF_TOPIC, b"junk", properties={"a": "b"}))
    good = broker.prepare(1)
    broker.restart()
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.half_progress) == (1, 1)
    broker.end(good, Resolution.COMMIT)
    assert broker.tx.stats().half_progress == 2


def test_memory_holds_only_op_records_at_or_above_progress(broker: Broker) -> None:
    for i in range(20):
        broker.end(broker.prepare(i), Resolution.COMMIT)
    stats = broker.tx.stats()
    assert (stats.finished_held, stats.half_progress, stats.op_progress) == (0, 20, 20)
    stuck = broker.prepare(20)
    for i in range(21, 26):
        broker.end(broker.prepare(i), Resolution.ROLLBACK)
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held, stats.half_progress, stats.op_progress) == (
        1,
        5,
        20,
        20,
    )

    broker.restart()  # the 20 op records below the progress are not read back
    assert broker.tx.stats() == stats
    broker.end(stuck, Resolution.COMMIT)
    stats = broker.tx.stats()
    assert (stats.unresolved, stats.finished_held, stats.half_progress, stats.op_progress) == (
        0,
        0,
        26,
        26,
    )
    broker.restart()
    assert broker.tx.stats() == stats
    assert [m.message_id for m in broker.real()] == [f"ID{i:010d}" for i in range(21)]


# --------------------------------------------------------------------------- the thread


def test_check_thread_runs_rounds_until_stopped(tmp_path: Path) -> None:
    b = Broker(tmp_path, check_interval_ms=5)
    answered = threading.Event()

    def commit(request: CheckRequest) -> None:
        b.tx.end(request.message_id, request.transaction_id, Resolution.COMMIT, from_check=True)
        answered.set()

    b.answer = commit
    p = b.prepare(1)
    b.now_ms = T0 + TIMEOUT_MS
    b.tx.start()
    b.tx.start()  # a second start is a no-op
    assert answered.wait(5)
    b.tx.stop()
    assert b.tx.failure is None
    assert [m.message_id for m in b.real()] == [p.message_id]
    assert b.offsets.query(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 2
    b.close()
    assert (tmp_path / "config" / "consumerOffset.json").exists()
