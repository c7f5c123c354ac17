"""The differential suite as a slow test (``./dev chaos`` runs it; ``./dev conformance``
is the direct way, with the per-scenario lines and ``--json``): every scenario against
Apache RocketMQ and ours, no difference left undocumented."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.registry import all_scenarios
from tests.conformance.runner import documented, run_all, summary_line


def test_every_documented_difference_names_a_scenario() -> None:
    names = {s.name for s in all_scenarios()}
    assert set(documented()) <= names
    assert all(reason.strip() for reason in documented().values())


@pytest.mark.slow
def test_no_undocumented_difference(tmp_path: Path) -> None:
    results = run_all(tmp_path)
    print(summary_line(results))
    undocumented = [(r.name, r.rocketmq, r.ours) for r in results if r.verdict == "undocumented"]
    assert not undocumented
