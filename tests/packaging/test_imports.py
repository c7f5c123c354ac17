"""A broker-only host installs no pyspark (and no pandas): every broker_core module, the
client and the ``rmq`` CLI included, imports with both blocked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "pandas"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import broker_core
failed = []
for info in pkgutil.walk_packages(broker_core.__path__, "broker_core."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed.append(f"{info.name}: {exc}")
print(len(sys.modules), *failed, sep="\\n")
"""


def test_broker_side_imports_without_pyspark_or_pandas() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[1:] == [""], lines[1:]  # no module failed
    assert int(lines[0]) > 100  # the walk imported the packages


def test_the_connector_needs_pyspark() -> None:
    """The blocker works: the connector's registration module does not import without it."""
    script = SCRIPT.replace("import broker_core\n", "import pyspark_rocketmq\nimport broker_core\n")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "blocked: pyspark" in done.stderr
