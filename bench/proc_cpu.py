"""CPU seconds a process has used (``/proc/<pid>/stat``: user + system, every thread, the
ones that ended included), for A/B figures that the load of a shared machine does not blur:
another process's work inflates wall time, not this process's CPU time."""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (tick resolution, 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)


def task_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid``'s live threads so far, read to the nanosecond
    (``/proc/<pid>/task/*/schedstat``): for rounds too short for :func:`cpu_s`'s ticks.
    A thread that ended is no longer counted (a broker's serving threads live on)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / 1e9


SETTLE_S = 0.3  # a broker's trace thread writes what it buffered every 200 ms


class Round:
    """One timed workload against the broker process ``pid``: msg/s, and the CPU seconds
    per message that process and this (the client's) used for it. The broker's are read
    :data:`SETTLE_S` after the work, so its background writing (trace records) counts,
    less what it burns idle over as long (measured just before the work: its timer
    threads), so short workloads are not dominated by it.
    ``with Round(pid) as r: ...; r.done(count)``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rate = 0.0
        self.broker_cpu = self.client_cpu = 0.0

    def __enter__(self) -> Round:
        time.sleep(SETTLE_S)  # earlier work's background writing is done before the clock
        idle = cpu_s(self.pid)
        time.sleep(SETTLE_S)
        self._broker, self._client = cpu_s(self.pid), time.process_time()
        self._idle = self._broker - idle
        self._wall = time.perf_counter()
        return self

    def done(self, count: int) -> None:
        self.rate = count / (time.perf_counter() - self._wall)
        client = time.process_time()
        time.sleep(SETTLE_S)
        used = cpu_s(self.pid) - self._broker - self._idle
        self.broker_cpu = max(0.0, used) / count
        self.client_cpu = (client - self._client) / count

    def __exit__(self, *exc: object) -> None:
        pass
