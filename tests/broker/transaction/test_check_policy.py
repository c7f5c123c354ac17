"""The pure check-back policy: due times, check decisions, live halves and the half ledger."""

from __future__ import annotations

import pytest

from broker_core.broker.transaction.check import (
    PROPERTY_CHECK_BASE_MS,
    PROPERTY_CHECK_IMMUNITY_S,
    CheckAction,
    HalfLedger,
    LiveHalf,
    check_due_ms,
    decide_check,
    live_half_from,
)
from broker_core.errors import InvalidArgumentError
from broker_core.message import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
)
from tests.broker.transaction.conftest import GROUP, T0, TIMEOUT_MS, half_props, live


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
