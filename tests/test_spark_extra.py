"""The ``spark`` extra installs a pandas that pyspark supports (issue 30, defect 9): with
pandas >= 3 pyspark warns on every Spark run."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

from packaging.requirements import Requirement
from pyspark.sql.pandas.utils import require_minimum_pandas_version

ROOT = Path(__file__).resolve().parents[1]


def test_the_spark_extra_pins_pandas_below_3() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pandas = [Requirement(r) for r in extras["optional-dependencies"]["spark"]]
    [pin] = [r for r in pandas if r.name == "pandas"]
    assert not pin.specifier.contains("3.0.0") and pin.specifier.contains("2.3.3")


def test_the_installed_pandas_draws_no_pyspark_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_minimum_pandas_version()
