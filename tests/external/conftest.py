"""Real RocketMQ 4.x clients nobody here wrote, against our NameServer and broker.

Set-up is automatic (CI runs on a fresh machine):

* ``cpp_python``: ``.venv-cpp/`` at the repository root, a virtualenv of its own holding
  PyPI ``rocketmq`` 0.4.4 (it bundles the RocketMQ C++ client ``librocketmq.so``). It is
  not the project's venv because it installs a top-level ``rocketmq`` package, as the
  official gRPC client does. Made once, then reused (a stamp file marks it complete).
* ``node_dir``: ``tests/external/node/`` with ``ali-ons`` installed by ``npm install``
  from its package.json; Debian's nodejs and npm are installed first if ``node`` is
  missing.
* ``cluster4x``: a NameServer and one broker (``--remoting-listen 127.0.0.1:0``, fast
  re-registration) as child processes; ``cluster4x.remoting`` is the address the broker
  registered as ``brokerAddr``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker_core.cluster.local import LocalCluster
from broker_core.namesrv.client import NameServerClient
from tests.server.conftest import DEFAULT_CONFIG

# The client scripts run in the C++ client's own venv; pytest (with --doctest-modules)
# must not import them here, where `rocketmq` is the official gRPC client.
collect_ignore_glob = ["cpp/*.py"]

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CPP_VENV = ROOT / ".venv-cpp"
CPP_PACKAGE = "rocketmq==0.4.4"
NODE_DIR = HERE / "node"


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


@pytest.fixture(scope="session")
def cpp_python() -> Path:
    """The interpreter of ``.venv-cpp`` (made with ``rocketmq`` 0.4.4 if missing)."""
    python = CPP_VENV / "bin" / "python"
    stamp = CPP_VENV / f".installed-{CPP_PACKAGE}"
    if not stamp.exists():
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(CPP_VENV)])
        _run([str(python), "-m", "pip", "install", "-q", CPP_PACKAGE])
        stamp.touch()
    return python


def _as_root(cmd: list[str]) -> list[str]:
    return cmd if os.geteuid() == 0 else ["sudo", *cmd]


@pytest.fixture(scope="session")
def node_dir() -> Path:
    """``tests/external/node`` with its npm packages installed (Node from Debian if absent)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _run(_as_root(["apt-get", "update", "-q"]))
        _run(_as_root(["apt-get", "install", "-y", "-q", "nodejs", "npm"]))
    if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        _run(["npm", "install", "--no-audit", "--no-fund"], cwd=NODE_DIR)
    return NODE_DIR


@dataclass
class Cluster4x:
    local: LocalCluster
    namesrv: str
    remoting: str  # the broker's remoting address, as registered
    grpc: str


def start_cluster4x(directory: Path, extra_broker_args: Sequence[str] = ()) -> Cluster4x:
    """``extra_broker_args`` go last (e.g. ``--config`` with an ``[auth]`` table)."""
    local = LocalCluster(
        directory,
        broker_config=DEFAULT_CONFIG,
        register_interval_ms=500,
        broker_args=[
            "--remoting-listen",
            "127.0.0.1:0",
            "--route-ttl-ms",
            "300",
            *extra_broker_args,
        ],
    )
    local.start(1, namesrv_args=["--scan-interval-ms", "200", "--broker-expiry-ms", "3000"])
    client = NameServerClient(local.namesrv)
    try:
        live = client.get_cluster_info()
    finally:
        client.close()
    data = live.brokers["broker-a"]
    return Cluster4x(local, local.namesrv, data.broker_addrs[0], local.endpoints["broker-a"])


@pytest.fixture(scope="module")
def cluster4x(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster4x]:
    cluster = start_cluster4x(tmp_path_factory.mktemp("cluster4x"))
    yield cluster
    cluster.local.stop()
    for name, proc in cluster.local.brokers.items():
        assert proc.process.returncode == 0, (name, "".join(proc.output[-40:]))


@dataclass
class ClientProcess:
    """A client script as a child: its JSON output lines collected as they come."""

    proc: subprocess.Popen[str]
    lines: list[dict[str, object]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.strip()
            if text == "READY":
                self.ready.set()
            elif text.startswith("{"):
                try:
                    self.lines.append(json.loads(text))
                except ValueError:  # kept for the failure's message; reading goes on
                    self.other.append(text)
                    continue
                # A consumer delivering messages has started, whether or not its start()
                # has returned: the C++ client's start() once returned only after 30 s
                # while its threads had consumed all 60 messages and committed their
                # offsets, and restarting it as "hung" left the second try nothing to read.
                self.ready.set()
            else:
                self.other.append(text)

    def wait_for(self, count: int, timeout_s: float) -> list[dict[str, object]]:
        """Wait until ``count`` lines arrived (or the deadline); returns them."""
        deadline = time.monotonic() + timeout_s
        while len(self.lines) < count and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return list(self.lines)

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def cpp_log_tail(pid: int, lines: int = 40) -> str:
    """The end of the C++ client's own log for process ``pid`` (it logs to a file, not to
    its output), to say where a client that never printed READY stopped."""
    path = Path.home() / "logs" / "rocketmq-cpp" / f"{pid}_rocketmq-cpp.log.0"
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"\n{path}:\n" + "\n".join(tail)


def spawn(cmd: list[str], cwd: Path | None = None, ready: bool = False) -> ClientProcess:
    """Start a client script; with ``ready`` wait (up to 30 s) for its ``READY`` line or
    its first delivered message (see ``ClientProcess._drain``).

    A client that neither returns from its start nor delivers anything is killed and
    started once more, with a warning that carries what it printed and its C++ log. A
    second start that hangs fails the test with both attempts' output.
    """
    failed: list[str] = []
    for _ in range(2):
        proc = subprocess.Popen(
            cmd,
            cwd=cwd or HERE,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        client = ClientProcess(proc)
        threading.Thread(target=client._drain, daemon=True).start()
        if not ready or client.ready.wait(30):
            if failed:
                warnings.warn(f"{cmd} started only on a second try: {failed[0]}", stacklevel=2)
            return client
        client.stop(5)
        failed.append(f"{client.other[-20:]}{cpp_log_tail(proc.pid)}")
    raise RuntimeError(f"{cmd} did not start, twice: " + "\n---\n".join(failed))
