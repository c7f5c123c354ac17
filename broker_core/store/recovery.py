"""Recovery on open: make the commitlog whole, then make everything derived agree with it.

Steps, in order:

1. Load the checkpoint (or its backup). Without one nothing derived can be trusted:
   consume queues and index are deleted and rebuilt from the whole commitlog.
2. Scan the commitlog from the checkpoint's durable offset, verifying every unit, and
   truncate the torn tail (``CommitLog.recover``).
3. Load consume queues and index files; any that fail to load are deleted and rebuilt.
4. Truncate consume queues and index to below the replay point (the lower of the
   dispatched offset and the recovered commitlog end) and replay dispatch from there.
5. Check every queue against the checkpoint's snapshot of its offsets, every unit for
   sanity and its first and last unit against the commitlog; rebuild any that disagrees.
6. Move each queue's minimum up to the commitlog's minimum (retention cut short).

Steps 3-6 read units the scan of step 2 did not cover (below the checkpoint). One that
fails verification there (bit rot, a zeroed page) ends the valid prefix as a torn tail
does: the commitlog is cut at the first bad unit of its segment and everything derived
is rebuilt from scratch up to the cut, rather than refusing to start.

The report says what was dropped and what was rebuilt, so the broker can log it.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.errors import CorruptionError, OffsetOutOfRangeError
from broker_core.store.commitlog import CommitLog, CommitLogRecovery
from broker_core.store.consume_queue import ConsumeQueue, ConsumeQueueSet
from broker_core.store.dispatch import Dispatcher
from broker_core.store.flush import Checkpoint
from broker_core.store.index_service import IndexService

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoveryReport:
    """What opening the store found and did."""

    abnormal_shutdown: bool
    checkpoint_problem: str = ""
    commitlog: CommitLogRecovery | None = None
    replayed_bytes: int = 0
    rebuilt_queues: dict[str, str] = field(default_factory=dict)
    index_problems: list[str] = field(default_factory=list)

    @property
    def dropped_bytes(self) -> int:
        return self.commitlog.dropped_bytes if self.commitlog else 0

    def summary(self) -> str:
        parts = [f"abnormal shutdown: {self.abnormal_shutdown}"]
        if self.checkpoint_problem:
            parts.append(f"checkpoint: {self.checkpoint_problem}")
        if self.commitlog and (self.commitlog.dropped_bytes or self.commitlog.problem):
            parts.append(
                f"commitlog truncated at {self.commitlog.end_offset}, dropped "
                f"{self.commitlog.dropped_bytes} bytes ({self.commitlog.problem or 'torn tail'})"
            )
        parts.extend(f"rebuilt queue {q}: {why}" for q, why in self.rebuilt_queues.items())
        parts.extend(f"index: {p}" for p in self.index_problems)
        parts.append(f"replayed {self.replayed_bytes} bytes")
        return "; ".join(parts)


def recover(
    *,
    checkpoint_path: Path,
    abnormal: bool,
    commitlog: CommitLog,
    queues: ConsumeQueueSet,
    index: IndexService,
    dispatcher: Dispatcher,
) -> RecoveryReport:
    """Run recovery (see module docstring); leaves the dispatcher at the commitlog end."""
    checkpoint, problem = Checkpoint.load(checkpoint_path)
    report = RecoveryReport(abnormal_shutdown=abnormal, checkpoint_problem=problem)
    commitlog.load()
    if checkpoint is None and commitlog.segments():
        _forget_derived(queues, index, report, "rebuilt from scratch: no usable checkpoint")
    elif checkpoint is None:
        report.checkpoint_problem = ""  # a new store
    report.commitlog = commitlog.recover(checkpoint.physical_flushed if checkpoint else 0)
    while True:
        try:
            _derive(checkpoint, commitlog, queues, index, dispatcher, report)
            return report
        except CorruptionError as exc:
            if not _cut_at(exc, commitlog, report):
                raise
            _forget_derived(queues, index, report, f"rebuilt from scratch: {exc}")
            checkpoint = None  # its offsets and snapshot describe the longer log


def _derive(
    checkpoint: Checkpoint | None,
    commitlog: CommitLog,
    queues: ConsumeQueueSet,
    index: IndexService,
    dispatcher: Dispatcher,
    report: RecoveryReport,
) -> None:
    """Steps 3-6: make queues and index agree with the recovered commitlog."""
    assert report.commitlog is not None
    end = report.commitlog.end_offset
    damaged = dict(queues.load_all())
    for key in damaged:
        queues.remove(*key)
    report.index_problems.extend(index.validate_and_repair())
    replay_from = min(checkpoint.dispatched, end) if checkpoint else commitlog.min_offset
    replay_from = max(replay_from, commitlog.min_offset)
    index_from = replay_from
    if index.rebuild_from is not None:
        index_from = max(commitlog.min_offset, min(index.rebuild_from, replay_from))
    for cq in queues.all():
        try:
            cq.truncate_from_physical(replay_from)
        except CorruptionError as exc:  # garbage units in a file that loaded: rebuild it
            damaged[(cq.topic, cq.queue_id)] = str(exc)
            queues.remove(cq.topic, cq.queue_id)
    index.truncate_from(index_from)
    dispatcher.dispatch_range(index_from, end, verify=True)
    index.mark_rebuilt()
    report.replayed_bytes = end - index_from
    if checkpoint is not None and end >= checkpoint.dispatched:
        damaged.update(_check_against_snapshot(queues, checkpoint))
    damaged.update(_check_against_commitlog(queues, commitlog))
    _rebuild(damaged, queues, commitlog, dispatcher, end, report)
    dispatcher.dispatched_offset = end
    for cq in queues.all():
        cq.delete_below_physical(commitlog.min_offset)  # retention may have been cut short
        commitlog.queue_offsets.set(cq.topic, cq.queue_id, cq.max_offset)
    index.delete_before(commitlog.min_offset)


def _forget_derived(
    queues: ConsumeQueueSet, index: IndexService, report: RecoveryReport, why: str
) -> None:
    """Delete every consume queue and index entry: they are rebuilt from the commitlog."""
    for cq in queues.all():
        queues.remove(cq.topic, cq.queue_id)
    shutil.rmtree(queues.root, ignore_errors=True)
    index.truncate_from(0)
    report.index_problems.append(why)


def _cut_at(exc: CorruptionError, commitlog: CommitLog, report: RecoveryReport) -> bool:
    """Cut the commitlog at the bad unit ``exc`` names; False when it names none there.

    Rescans the unit's segment from its start (always a unit boundary), so the cut lands
    on the first unit of that segment that does not verify, and folds what was dropped
    into ``report.commitlog``. Each cut shortens the log, so recovery's retries end.
    """
    position, low, high = exc.position, commitlog.min_offset, commitlog.max_offset
    in_log = Path(exc.path).parent == commitlog.directory  # not a queue or index file
    if not in_log or not low <= position < high or report.commitlog is None:
        return False
    cut = commitlog.recover(position - (position - low) % commitlog.segment_size)
    if cut.end_offset > position:
        return False  # the unit verifies on a rescan: the error came from elsewhere
    first = report.commitlog
    log.warning(
        "commitlog unit at %d below the checkpoint fails verification: %s; cutting the log there",
        position,
        exc,
    )
    report.commitlog = CommitLogRecovery(
        min(first.scanned_from, cut.scanned_from),
        cut.end_offset,
        first.dropped_bytes + cut.dropped_bytes,
        first.dropped_segments + cut.dropped_segments,
        cut.problem or str(exc),
    )
    return True


def _check_against_snapshot(queues: ConsumeQueueSet, cp: Checkpoint) -> dict[tuple[str, int], str]:
    """A queue must still span at least what it spanned at the checkpoint."""
    bad: dict[tuple[str, int], str] = {}
    for topic, table in cp.queue_offsets.items():
        for qid, (min_offset, max_offset) in table.items():
            cq = queues.get(topic, int(qid))
            have = (cq.min_offset, cq.max_offset) if cq else (0, 0)
            if (
                have[1] < max_offset
                or (have[0] > min_offset and have[1] > have[0])
                or (cq is None and max_offset > 0)
            ):
                bad[(topic, int(qid))] = (
                    f"spans [{have[0]}, {have[1]}), checkpoint says [{min_offset}, {max_offset})"
                )
    return bad


Damage = dict[tuple[str, int], str]


def _check_against_commitlog(queues: ConsumeQueueSet, clog: CommitLog) -> Damage:
    """Each queue's first and last unit must point at its own message in the commitlog."""
    bad: dict[tuple[str, int], str] = {}
    for cq in queues.all():
        why = cq.verify(clog.max_offset)
        if why:
            bad[(cq.topic, cq.queue_id)] = why
            continue
        for logical in {cq.min_offset, cq.max_offset - 1}:
            if cq.min_offset <= logical < cq.max_offset:
                why = _unit_problem(cq, logical, clog)
                if why:
                    bad[(cq.topic, cq.queue_id)] = why
                    break
    return bad


def _unit_problem(cq: ConsumeQueue, logical: int, clog: CommitLog) -> str:
    try:
        phys, size, _tag = cq.get_unit(logical)
        if phys < clog.min_offset:
            return ""  # below retention: cleanup moves the queue's minimum
        msg = clog.read_message(phys, size)
    except (CorruptionError, OffsetOutOfRangeError) as exc:
        return f"unit {logical} unreadable: {exc}"
    if (msg.topic, msg.queue_id, msg.queue_offset) != (cq.topic, cq.queue_id, logical):
        return f"unit {logical} points at {msg.topic}:{msg.queue_id}@{msg.queue_offset}"
    return ""


def _rebuild(
    damaged: dict[tuple[str, int], str],
    queues: ConsumeQueueSet,
    clog: CommitLog,
    dispatcher: Dispatcher,
    end: int,
    report: RecoveryReport,
) -> None:
    if not damaged:
        return
    for key, why in damaged.items():
        log.warning("rebuilding consume queue %s:%d: %s", key[0], key[1], why)
        queues.remove(*key)
        report.rebuilt_queues[f"{key[0]}:{key[1]}"] = why
    dispatcher.dispatch_range(
        clog.min_offset, end, only_queues=set(damaged), index=False, verify=True
    )
