"""A real Spark standalone cluster on loopback for tests: one master, N workers.

pip's pyspark ships no start-master.sh, but its ``sbin/spark-daemon.sh`` starts the
master and worker classes (CLUSTER_REFERENCE.md §3.2). Every port is chosen free and
explicit (a worker's default web UI port 8081 is also the broker's default), logs and pid
files go under the given directory, and :meth:`StandaloneCluster.stop` stops every daemon.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_env(run_dir: Path) -> dict[str, str]:
    """Environment for the daemons and spark-submit: loopback, this venv's Python."""
    return os.environ | {
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(run_dir / "logs"),
        "SPARK_PID_DIR": str(run_dir / "pids"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers (1 core, 1 GiB each) started by spark-daemon.sh."""

    run_dir: Path
    workers: int
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    started: list[tuple[str, int]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        done = subprocess.run(
            [str(SPARK_HOME / "sbin" / "spark-daemon.sh"), action, cls, str(instance), *args],
            env=spark_env(self.run_dir),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"spark-daemon.sh {action} {cls} {instance}: {done.stderr}")

    def start(self, timeout_s: float = 90.0) -> None:
        """Start the daemons; return when the master reports every worker ALIVE."""
        self._daemon(
            "start",
            MASTER,
            1,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self.started.append((MASTER, 1))
        for i in range(1, self.workers + 1):
            self._daemon(
                "start",
                WORKER,
                i,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(self.run_dir / f"work{i}"),
                self.url,
            )
            self.started.append((WORKER, i))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                alive = [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
                if len(alive) == self.workers:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.workers} workers not ALIVE in {timeout_s} s: {self.logs()}")

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return dict(json.load(reply))

    def submit(
        self,
        script: Path,
        *args: str,
        timeout_s: float = 600.0,
    ) -> subprocess.CompletedProcess[str]:
        """spark-submit ``script`` to this cluster (one executor per worker, 512 MiB)."""
        submit = Path(sys.executable).parent / "spark-submit"
        cmd = [
            str(submit),
            "--master",
            self.url,
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.driver.bindAddress=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--executor-memory",
            "512m",
            "--total-executor-cores",
            str(self.workers),
            str(script),
            *args,
        ]
        return subprocess.run(
            cmd, env=spark_env(self.run_dir), capture_output=True, text=True, timeout=timeout_s
        )

    def executors_per_worker(self) -> list[int]:
        """How many executor directories (``work{i}/app-*/N``) each worker has created."""
        return [
            len(list((self.run_dir / f"work{i}").glob("app-*/*")))
            for i in range(1, self.workers + 1)
        ]

    def logs(self) -> str:
        return "".join(
            p.read_text(errors="replace")[-3000:]
            for p in sorted((self.run_dir / "logs").glob("*.out"))
        )

    def stop(self) -> None:
        """Stop every daemon started, workers first."""
        for cls, instance in reversed(self.started):
            self._daemon("stop", cls, instance)
        self.started.clear()
