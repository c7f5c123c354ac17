"""A history of sends and reads, and a checker for it (in the spirit of Jepsen's queue
checkers), usable by any test that sends under faults.

Recording (thread-safe)::

    history = History()
    op = history.invoke("m-17")            # before the send
    history.ok(op, queue="g:3")            # acknowledged (queue = where the broker put it)
    history.fail(op, exc)                  # definitely not written (refused before storing)
    history.unknown(op, exc)               # may or may not be written (timeout, reset, ...)
    history.read("m-17", queue="g:3")      # a reader got it, in this queue's order
    history.fault("isolate master"); history.fault("heal")

``check(history, fifo=True)`` returns a ``Report``:

* ``lost``: acknowledged, never read (must be empty);
* ``phantoms``: read, never sent; ``failed_read``: read although its send failed;
* ``duplicates``: read more than once (id → times read);
* ``reordered``: for FIFO topics, per queue, a message read before one whose send was
  acknowledged before the first was even invoked (a pair the producer ordered);
* summary: operations, acknowledged, failed, unknown, and for each fault the time from it
  to the first acknowledgement of a send invoked after the first send it disrupted before
  the next fault (``resume_s``; 0 when it disrupted none, None when nothing was
  acknowledged again).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

INVOKED, OK, FAIL, UNKNOWN = "invoke", "ok", "fail", "unknown"


@dataclass
class Op:
    msg_id: str
    invoked_at: float
    outcome: str = INVOKED
    completed_at: float = 0.0
    queue: str = ""
    error: str = ""


@dataclass
class Read:
    msg_id: str
    queue: str


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invoke(self, msg_id: str) -> Op:
        op = Op(msg_id, time.monotonic())
        with self._lock:
            self.ops.append(op)
        return op

    def _complete(self, op: Op, outcome: str, queue: str, error: object) -> None:
        op.completed_at, op.queue, op.error = time.monotonic(), queue, repr(error) if error else ""
        op.outcome = outcome

    def ok(self, op: Op, queue: str = "") -> None:
        self._complete(op, OK, queue, None)

    def fail(self, op: Op, error: object) -> None:
        self._complete(op, FAIL, "", error)

    def unknown(self, op: Op, error: object) -> None:
        self._complete(op, UNKNOWN, "", error)

    def read(self, msg_id: str, queue: str = "") -> None:
        with self._lock:
            self.reads.append(Read(msg_id, queue))

    def in_flight_at(self, t: float) -> list[Op]:
        """Sends invoked by ``t`` and not completed before it (outcome-less ones included)."""
        with self._lock:
            ops = list(self.ops)
        return [
            op
            for op in ops
            if op.invoked_at <= t and (op.outcome == INVOKED or op.completed_at >= t)
        ]

    def fault(self, name: str) -> None:
        with self._lock:
            self.faults.append((time.monotonic(), name))


@dataclass
class Report:
    operations: int
    acknowledged: int
    failed: int
    unknown: int
    lost: list[str]
    phantoms: list[str]
    failed_read: list[str]
    duplicates: dict[str, int]
    reordered: list[tuple[str, str, str]]  # (queue, read first, ordered first)
    resume_s: list[tuple[str, float | None]]  # (fault, seconds; None = never resumed)

    def violations(self, max_duplicates: int = 0) -> list[str]:
        """What breaks the guarantees (duplicates beyond ``max_duplicates`` included)."""
        found = []
        if self.lost:
            found.append(f"{len(self.lost)} acknowledged but lost: {self.lost[:10]}")
        if self.phantoms:
            found.append(f"{len(self.phantoms)} read but never sent: {self.phantoms[:10]}")
        if self.failed_read:
            found.append(f"{len(self.failed_read)} read although failed: {self.failed_read[:10]}")
        extra = sum(n - 1 for n in self.duplicates.values())
        if extra > max_duplicates:
            found.append(f"{extra} duplicate reads > {max_duplicates} allowed")
        if self.reordered:
            found.append(f"{len(self.reordered)} order violations: {self.reordered[:5]}")
        return found

    def assert_valid(self, max_duplicates: int = 0) -> None:
        found = self.violations(max_duplicates)
        assert not found, "history check failed:\n" + "\n".join(found) + "\n" + self.summary()

    def summary(self) -> str:
        resumes = ", ".join(
            f"{name}: {'never' if s is None else f'{s:.2f} s'}" for name, s in self.resume_s
        )
        extra = sum(n - 1 for n in self.duplicates.values())
        return (
            f"operations {self.operations}, acknowledged {self.acknowledged}, "
            f"lost {len(self.lost)}, duplicates {extra}, unknown {self.unknown}, "
            f"failed {self.failed}; resume after faults: {resumes or '-'}"
        )


def check(history: History, fifo: bool = False) -> Report:
    """Check a finished history (every read done); see the module docstring."""
    ops = list(history.ops)
    by_id = {op.msg_id: op for op in ops}
    times_read = Counter(r.msg_id for r in history.reads)
    acked = [op for op in ops if op.outcome == OK]
    return Report(
        operations=len(ops),
        acknowledged=len(acked),
        failed=sum(op.outcome == FAIL for op in ops),
        unknown=sum(op.outcome in (UNKNOWN, INVOKED) for op in ops),
        lost=[op.msg_id for op in acked if op.msg_id not in times_read],
        phantoms=[m for m in times_read if m not in by_id],
        failed_read=[m for m in times_read if m in by_id and by_id[m].outcome == FAIL],
        duplicates={m: n for m, n in times_read.items() if n > 1},
        reordered=_reordered(history.reads, by_id) if fifo else [],
        resume_s=_resumes(ops, history.faults),
    )


def _reordered(reads: list[Read], by_id: dict[str, Op]) -> list[tuple[str, str, str]]:
    """Per queue, in read order: a message acknowledged before an earlier-read message was
    invoked should have come first."""
    found = []
    latest: dict[str, Op] = {}  # per queue: the read op invoked latest so far
    seen: set[str] = set()
    for read in reads:
        op = by_id.get(read.msg_id)
        if op is None or read.msg_id in seen:
            continue
        seen.add(read.msg_id)
        before = latest.get(read.queue)
        if op.outcome == OK and before is not None and op.completed_at < before.invoked_at:
            found.append((read.queue, before.msg_id, op.msg_id))
        if before is None or op.invoked_at > before.invoked_at:
            latest[read.queue] = op
    return found


def _resumes(ops: list[Op], faults: list[tuple[float, str]]) -> list[tuple[str, float | None]]:
    ends = [at for at, _ in faults[1:]] + [float("inf")]
    return [(name, _resume(ops, at, end)) for (at, name), end in zip(faults, ends, strict=False)]


def _resume(ops: list[Op], at: float, next_fault: float) -> float | None:
    """Seconds from a fault at ``at`` to the first acknowledgement of a send invoked after
    the first send it disrupted (invoked after ``at`` and before the next fault, not
    acknowledged); 0 when it disrupted none."""
    after = sorted((op for op in ops if op.invoked_at >= at), key=lambda op: op.invoked_at)
    hit = next(
        (op.invoked_at for op in after if op.outcome != OK and op.invoked_at < next_fault), None
    )
    if hit is None:
        return 0.0
    done = [op.completed_at for op in after if op.outcome == OK and op.invoked_at > hit]
    return min(done) - at if done else None
