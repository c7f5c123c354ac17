"""The README's claims about the repository hold (issue 13, item 21)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_dev_test_runs_the_suite_without_slow_tests_as_the_readme_says() -> None:
    dev = (ROOT / "dev").read_text()
    test_branch = dev[dev.index("  test)") : dev.index(";;", dev.index("  test)"))]
    assert 'pytest -m "not slow"' in test_branch
    line = next(li for li in README.splitlines() if li.startswith("./dev test"))
    assert "without the slow tests" in line and "doctests" in line


def test_doctests_of_the_packages_are_collected() -> None:
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = pytest_ini["ini_options"]
    assert "--doctest-modules" in options["addopts"]
    assert {"tests", "broker_core", "connector"} <= set(options["testpaths"])


def test_what_is_here_lists_the_features() -> None:
    table = README[README.index("## What is here") : README.index("## Using the store")]
    for feature in (
        "POP",
        "transactional",
        "timing wheel",
        "long polling",
        "bulk service",
        "connector/",
    ):
        assert re.search(re.escape(feature), table, re.IGNORECASE), feature
