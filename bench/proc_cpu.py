"""CPU seconds a process has used (``/proc/<pid>/stat``: user + system, every thread, the
ones that ended included), for A/B figures that the load of a shared machine does not blur:
another process's work inflates wall time, not this process's CPU time."""

from __future__ import annotations

import os
from pathlib import Path

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (tick resolution, 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14, 15)
