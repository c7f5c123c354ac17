"""Printing results: a readable table, then one JSON line (the machine-readable result)."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    """One workload's outcome; ``ratio`` is ours / baseline (higher is better)."""

    workload: str
    ours: float
    baseline: float
    unit: str
    goal: float
    details: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else 0.0

    def to_json(self) -> str:
        return json.dumps({
            "workload": self.workload, "ours": round(self.ours, 3),
            "baseline": round(self.baseline, 3), "unit": self.unit,
            "ratio": round(self.ratio, 3), "goal": self.goal,
            "meets_goal": self.ratio >= self.goal, "details": self.details,
            "machine": machine(),
        })  # fmt: skip


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "system": platform.platform()}  # fmt: skip


def print_result(result: Result, as_json: bool) -> None:
    width = max(len(r[0]) for r in result.rows) if result.rows else 10
    print(f"== {result.workload} ==")
    for name, value, note in result.rows:
        print(f"  {name:<{width}}  {value:>14}  {note}")
    print(f"  {'ratio (ours / baseline)':<{width}}  {result.ratio:>14.3f}  goal ≥ {result.goal}")
    if as_json:
        print(result.to_json())
