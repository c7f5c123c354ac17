"""Suite-wide pytest set-up.

Doctests that make stores with ``tempfile.mkdtemp()`` (as the docstrings show users) get
their temporary files under the test's own ``tmp_path``, so pytest's retention policy
(``tmp_path_retention_policy`` in pyproject.toml) removes them with the test's directory
instead of leaving a store in /tmp per run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def _doctest_temp_under_tmp_path(request: pytest.FixtureRequest) -> None:
    if isinstance(request.node, DoctestItem):
        tmp_path: Path = request.getfixturevalue("tmp_path")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
