"""Fixtures of the chaos tests: a figures recorder and the shared Spark session.

Chaos tests measure things the issue wants reported (cycles, acknowledged, lost, RSS):
each calls ``chaos_figures(name, **figures)``. The figures are printed at once (seen
with ``-s``), listed in a "chaos figures" section at the end of the pytest run (seen
without ``-s``), and appended as JSON lines to ``$CHAOS_FIGURES_JSON`` when it is set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from tests.connector.conftest import spark  # the one SparkSession of the run

__all__ = ["spark"]

_FIGURES: list[tuple[str, dict[str, Any]]] = []

Recorder = Callable[..., None]


@pytest.fixture
def chaos_figures(request: pytest.FixtureRequest) -> Recorder:
    def record(name: str, **figures: Any) -> None:
        entry = {"test": request.node.nodeid, **figures}
        _FIGURES.append((name, entry))
        print(f"\nCHAOS {name}: {json.dumps(figures, sort_keys=True)}")
        path = os.environ.get("CHAOS_FIGURES_JSON")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"name": name, **entry}, sort_keys=True) + "\n")

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("chaos figures")
    for name, entry in _FIGURES:
        figures = {k: v for k, v in entry.items() if k != "test"}
        terminalreporter.write_line(f"{name}: {json.dumps(figures, sort_keys=True)}")
