"""Retention: delete old commitlog segments, then let consume queues and index follow.

A segment may go when it is older than ``file_reserved_hours`` (by its file's mtime, as
RocketMQ does), or — oldest first — while the disk is fuller than
``disk_max_used_ratio``. The active segment and anything not yet flushed and dispatched
is never deleted. After segments go, consume-queue files wholly below the new commitlog
minimum are deleted and each queue's minimum offset moves up, so reads below it raise
"offset out of range (min is …)".

Threads: ``run_once`` runs on the cleanup thread (or a test); it takes no store-wide lock,
relying on the commitlog's and queues' copy-on-write file lists.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.service_thread import ServiceThread
from broker_core.store.commitlog import CommitLog
from broker_core.store.consume_queue import ConsumeQueueSet
from broker_core.store.index_service import IndexService

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CleanupReport:
    deleted_segments: list[str] = field(default_factory=list)
    deleted_queue_files: int = 0
    min_physical_offset: int = 0
    disk_used_ratio: float = 0.0


def disk_used_ratio(path: str) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class CleanupService:
    """Deletes expired segments and what derives from them."""

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        index: IndexService,
        *,
        file_reserved_hours: float,
        disk_max_used_ratio: float,
        safe_offset: Callable[[], int],
        disk_ratio: Callable[[], float] | None = None,
    ) -> None:
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self._reserved_ms = file_reserved_hours * 3_600_000
        self._max_ratio = disk_max_used_ratio
        self._safe_offset = safe_offset  # min(flushed, dispatched): never delete beyond
        self._disk_ratio = disk_ratio or (lambda: disk_used_ratio(str(commitlog.directory)))
        self._clock_ms: Callable[[], int] = lambda: 0  # set by ``start``
        self.thread = ServiceThread("cleanup", self._round, interval_ms=0)

    def run_once(self, now_ms: int) -> CleanupReport:
        report = CleanupReport(disk_used_ratio=self._disk_ratio())
        pressure = report.disk_used_ratio > self._max_ratio
        for seg in self._commitlog.segments()[:-1]:
            if seg.base_offset + seg.size > self._safe_offset():
                break
            expired = os.stat(seg.path).st_mtime * 1000 + self._reserved_ms < now_ms
            if not (expired or pressure):
                break
            self._commitlog.delete_first_segment()
            report.deleted_segments.append(seg.path.name)
            if pressure:
                pressure = self._disk_ratio() > self._max_ratio
        report.min_physical_offset = self._commitlog.min_offset
        if report.deleted_segments:
            for cq in self._queues.all():
                report.deleted_queue_files += cq.delete_below_physical(report.min_physical_offset)
            self._index.delete_before(report.min_physical_offset)
            log.info("retention deleted %s", ", ".join(report.deleted_segments))
        return report

    def start(self, interval_ms: int, clock_ms: Callable[[], int]) -> None:
        """Run :meth:`run_once` every ``interval_ms``; a failed run is logged and retried."""
        self._clock_ms = clock_ms
        self.thread.interval_ms = interval_ms
        self.thread.start()

    def _round(self) -> None:
        self.run_once(self._clock_ms())

    def stop(self) -> None:
        self.thread.stop()
