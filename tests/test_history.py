"""The history checker on hand-made histories: each kind of anomaly found, and nothing
reported for a clean history."""

from __future__ import annotations

import pytest

from tests.history import FAIL, OK, UNKNOWN, History, Op, check


def made(
    *ops: tuple[str, float, str, float, str], reads: tuple[tuple[str, str], ...] = ()
) -> History:
    """ops: (id, invoked_at, outcome, completed_at, queue); reads: (id, queue) in order."""
    history = History()
    history.ops = [Op(m, at, outcome, done, queue) for m, at, outcome, done, queue in ops]
    for msg_id, queue in reads:
        history.read(msg_id, queue)
    return history


CLEAN = (("a", 0.0, OK, 1.0, "q0"), ("b", 2.0, OK, 3.0, "q0"), ("c", 2.5, OK, 3.5, "q1"))


def test_a_clean_history_has_no_violations() -> None:
    report = check(made(*CLEAN, reads=(("a", "q0"), ("c", "q1"), ("b", "q0"))), fifo=True)
    assert report.violations() == []
    assert (report.operations, report.acknowledged, report.unknown) == (3, 3, 0)


def test_an_acknowledged_message_never_read_is_lost() -> None:
    report = check(made(*CLEAN, reads=(("a", "q0"), ("c", "q1"))))
    assert report.lost == ["b"]
    with pytest.raises(AssertionError, match="1 acknowledged but lost"):
        report.assert_valid()


def test_unknown_and_failed_sends_may_be_missing_but_a_failed_one_must_not_be_read() -> None:
    ops = (("a", 0.0, OK, 1.0, "q0"), ("u", 1.0, UNKNOWN, 2.0, ""), ("f", 1.0, FAIL, 2.0, ""))
    assert check(made(*ops, reads=(("a", "q0"),))).violations() == []
    assert check(made(*ops, reads=(("a", "q0"), ("u", "q0")))).violations() == []
    report = check(made(*ops, reads=(("a", "q0"), ("f", "q0"))))
    assert report.failed_read == ["f"] and len(report.violations()) == 1
    assert (report.unknown, report.failed) == (1, 1)


def test_read_but_never_sent_is_a_phantom() -> None:
    report = check(made(*CLEAN, reads=(("a", "q0"), ("b", "q0"), ("c", "q1"), ("zz", "q1"))))
    assert report.phantoms == ["zz"]
    assert "never sent" in report.violations()[0]


def test_duplicates_are_counted_and_bounded() -> None:
    reads = (("a", "q0"), ("a", "q0"), ("b", "q0"), ("b", "q0"), ("b", "q0"), ("c", "q1"))
    report = check(made(*CLEAN, reads=reads))
    assert report.duplicates == {"a": 2, "b": 3}
    assert report.violations(max_duplicates=3) == []
    assert "3 duplicate reads > 2 allowed" in report.violations(max_duplicates=2)[0]


def test_fifo_order_is_checked_per_queue_only_for_ordered_pairs() -> None:
    # b was acked (3.0) before d was invoked (4.0): reading d first breaks FIFO
    ops = (*CLEAN, ("d", 4.0, OK, 5.0, "q0"))
    report = check(made(*ops, reads=(("a", "q0"), ("d", "q0"), ("b", "q0"))), fifo=True)
    assert report.reordered == [("q0", "d", "b")]
    assert check(made(*ops, reads=(("a", "q0"), ("d", "q0"), ("b", "q0")))).reordered == []
    # concurrent sends (x invoked before y was acked, and vice versa) have no order
    concurrent = (("x", 0.0, OK, 2.0, "q0"), ("y", 1.0, OK, 1.5, "q0"))
    assert check(made(*concurrent, reads=(("y", "q0"), ("x", "q0"))), fifo=True).reordered == []
    # another queue's order is its own
    assert (
        check(
            made(*ops, reads=(("c", "q1"), ("a", "q0"), ("b", "q0"), ("d", "q0"))), fifo=True
        ).reordered
        == []
    )


def test_time_to_resume_after_each_fault() -> None:
    history = made(
        ("a", 0.0, OK, 1.0, "q"),
        ("b", 4.5, OK, 4.6, "q"),  # acked within the fault's first moments
        ("c", 5.0, FAIL, 6.0, ""),  # the first send the partition disrupted
        ("d", 7.0, OK, 9.5, "q"),
        ("e", 8.5, UNKNOWN, 12.0, ""),
        ("f", 20.0, OK, 20.1, "q"),
    )
    history.faults = [(4.0, "partition"), (8.0, "heal"), (15.0, "nothing happens")]
    # the heal disrupted e (8.5); a fault that disrupts nothing before the next one: 0
    report = check(history)
    assert [name for name, _ in report.resume_s] == ["partition", "heal", "nothing happens"]
    assert [s for _, s in report.resume_s] == pytest.approx([5.5, 12.1, 0.0])
    assert "partition: 5.50 s" in report.summary()
    history.faults = [(21.0, "at the end")]
    history.ops.append(Op("g", 22.0, FAIL, 23.0, ""))
    assert check(history).resume_s == [("at the end", None)]
    assert "at the end: never" in check(history).summary()
    history.faults = [(3.0, "quiet"), (4.9, "loud")]  # c (5.0) is the next fault's doing
    assert [s for _, s in check(history).resume_s] == pytest.approx([0.0, 4.6])


def test_recording_sets_outcomes() -> None:
    history = History()
    ok, lost = history.invoke("1"), history.invoke("2")
    history.ok(ok, queue="g:0")
    history.unknown(lost, TimeoutError("t"))
    assert (ok.outcome, ok.queue, lost.outcome) == (OK, "g:0", UNKNOWN)
    assert "TimeoutError" in lost.error
