"""The wheel built from the repository, installed in a fresh venv (no editable install,
no system site-packages): the bare package runs the broker side without pyspark; with the
``spark`` extra, format("rocketmq") writes, batch-reads and stream-reads from a script run
outside the repository; the spark_jobs ship as ``python -m`` modules and entry points.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from tests.server.conftest import BrokerProcess, start_broker

ROOT = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(
    ".venv*",
    "build",
    "dist",
    ".git",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "node_modules",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("wheel-broker"))
    yield proc
    assert proc.stop() == 0, "".join(proc.output[-50:])


def run(cmd: list[str], cwd: Path, timeout_s: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-4000:]}"
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    """A wheel of a copy of the working tree (the checkout's build/ stays untouched)."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        tmp,
    )
    (wheel,) = (tmp / "dist").glob("rocketmq_spark-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_in_a_fresh_venv(broker: BrokerProcess, tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for package in ("broker_core", "connector", "pyspark_rocketmq", "spark_jobs"):
        assert f"{package}/__init__.py" in names
    assert not any(n.startswith("tests/") for n in names)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip"]
    run([*pip, "install", "-q", str(wheel)], tmp_path)  # broker-only host: no extras
    bare = run(
        [
            py,
            "-c",
            "import importlib.util as u, broker_core.cli, broker_core.client; "
            "print(u.find_spec('pyspark'))",
        ],
        tmp_path,
    )
    assert bare.strip() == "None"

    run([*pip, "install", "-q", f"{wheel}[spark]"], tmp_path)
    assert "--input-topic" in run([str(venv / "bin" / "rmq-order-events"), "--help"], tmp_path)
    assert "--output" in run([py, "-m", "spark_jobs.archive", "--help"], tmp_path)

    topic = "wheel-orders"
    with RocketMQClient(broker.endpoint) as client:
        client.create_topic(topic, queues=2)
    script = tmp_path / "wheel_job.py"
    shutil.copy(Path(__file__).with_name("wheel_job.py"), script)
    out = run([py, str(script), broker.endpoint, topic, str(tmp_path / "ckpt")], tmp_path)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["connector_file"].startswith(str(venv))
    assert seen["batch"] == seen["stream"] == [f"w-{i}" for i in range(5)]
    queues: dict[int, list[int]] = {}
    for queue_id, offset in seen["batch_offsets"]:
        queues.setdefault(queue_id, []).append(offset)
    assert all(offsets == list(range(len(offsets))) for offsets in queues.values())
