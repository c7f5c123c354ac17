"""Printing results: a readable table, then one JSON line (the machine-readable result).

``ratio`` is always ``ours / baseline``. Whether that is good depends on the workload:

* ``higher_is_better`` (throughput, the default): the goal is a floor, ``ratio ≥ goal``.
* lower is better (latency, memory): the goal is a ceiling, ``ratio ≤ goal``.
* ``goal_on = "ours"``: the goal bounds the absolute figure, not the ratio (latency's
  "p99 ≤ 2 ms"); the ratio is then shown for comparison only.

``checks`` are further named pass/fail conditions (e.g. backlog's "RSS < 1 GiB"); a result
meets its goal only when its main goal and every check hold.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class Result:
    """One workload's outcome; see the module docstring for how the goal is judged."""

    workload: str
    ours: float
    baseline: float
    unit: str
    goal: float
    details: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    higher_is_better: bool = True
    goal_on: Literal["ratio", "ours"] = "ratio"
    baseline_name: str = "baseline"
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else 0.0

    @property
    def judged(self) -> float:
        """The figure the goal applies to: the ratio, or ours itself."""
        return self.ratio if self.goal_on == "ratio" else self.ours

    @property
    def meets_goal(self) -> bool:
        value = self.judged
        main = value >= self.goal if self.higher_is_better else 0 < value <= self.goal
        return main and all(self.checks.values())

    def goal_text(self) -> str:
        """E.g. ``ratio ≥ 1.5`` or ``ours ≤ 2 ms``."""
        sign = "≥" if self.higher_is_better else "≤"
        if self.goal_on == "ours":
            return f"ours {sign} {self.goal:g} {self.unit}"
        return f"ratio {sign} {self.goal:g}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "ours": round(self.ours, 3),
            "baseline": round(self.baseline, 3),
            "unit": self.unit,
            "ratio": round(self.ratio, 3),
            "goal": self.goal,
            "higher_is_better": self.higher_is_better,
            "goal_on": self.goal_on,
            "goal_text": self.goal_text(),
            "baseline_name": self.baseline_name,
            "checks": self.checks,
            "meets_goal": self.meets_goal,
            "details": self.details,
            "machine": machine(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.platform(),
    }


def print_result(result: Result, as_json: bool) -> None:
    width = max([len(r[0]) for r in result.rows] + [24])
    direction = "higher" if result.higher_is_better else "lower"
    print(f"== {result.workload} ==")
    for name, value, note in result.rows:
        print(f"  {name:<{width}}  {value:>14}  {note}")
    print(f"  {'ratio (ours / baseline)':<{width}}  {result.ratio:>14.3f}  {direction} is better")
    for name, ok in result.checks.items():
        print(f"  {'check':<{width}}  {'met' if ok else 'NOT met':>14}  {name}")
    verdict = "met" if result.meets_goal else "NOT met"
    print(f"  {'goal':<{width}}  {verdict:>14}  {result.goal_text()}")
    if as_json:
        print(result.to_json())


def percentiles_ms(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99 and p999 (nearest rank) of nanosecond samples, in milliseconds."""
    if not samples_ns:
        raise ValueError("no samples")
    ordered = sorted(samples_ns)
    return {
        name: round(ordered[max(0, math.ceil(q * len(ordered)) - 1)] / 1e6, 3)
        for name, q in (("p50", 0.50), ("p99", 0.99), ("p999", 0.999))
    }
