"""No product module over 500 lines (STYLE.md: small modules; issue 26).

A module that outgrows this is split by concern, as the client and the broker were,
rather than allowed to grow: the check counts every line of every ``.py`` file of the
product packages.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker_core", "connector", "pyspark_rocketmq", "spark_jobs", "bench", "peers")
MAX_LINES = 500


def oversized(root: Path = ROOT) -> list[str]:
    """``path: lines`` of every module over :data:`MAX_LINES`."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                found.append(f"{path.relative_to(root).as_posix()}: {lines}")
    return found


def test_no_module_over_500_lines() -> None:
    assert oversized() == []


def test_the_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "broker_core").mkdir()
    (tmp_path / "broker_core" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "broker_core" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(tmp_path) == [f"broker_core/long.py: {MAX_LINES + 1}"]
