"""The non-Java clients of the conformance suite, each as a child process.

* :func:`python_client`: the official Python client (``tests/conformance/pyclient.py``, in
  the project's venv, which installs ``rocketmq-python-client``), gRPC endpoint.
* :func:`node_client`: the official Node.js gRPC client (rocketmq-client-nodejs) through
  ``tests/external/grpc_node/interop.js``; npm installs it on first use.
* :func:`cpp_client` / :class:`CppConsumer`: the RocketMQ C++ client (PyPI ``rocketmq``
  0.4.4, in ``.venv-cpp``, made on first use) through ``tests/external/cpp/*.py``, given
  a NameServer.

Each child's files (the clients' logs) go under the target's ``home``; a run that outlives
its timeout is killed and raises :class:`~peers.drivers.DriverError`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from peers.drivers import DriverError, Run, _parse

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL = ROOT / "tests" / "external"
CPP_VENV = ROOT / ".venv-cpp"
CPP_PACKAGE = "rocketmq==0.4.4"
_CPP_LOCK = threading.Lock()


def _run(cmd: list[str], home: Path, timeout_s: float, env: dict[str, str] | None = None) -> str:
    home.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "HOME": str(home), **(env or {})}
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        raise DriverError(
            f"{' '.join(cmd[:4])} ran over {timeout_s:.0f} s:\n{out[-2000:]}"
        ) from None
    return done.stdout + (
        f"\nexit {done.returncode}: {done.stderr[-1500:]}" if done.returncode else ""
    )


def python_client(endpoint: str, args: list[str], home: Path, timeout_s: float = 120) -> Run:
    cmd = [sys.executable, "-m", "tests.conformance.pyclient", endpoint, *args]
    return _parse(_run(cmd, home / "python", timeout_s))


def node_client(
    endpoint: str, args: list[str], home: Path, timeout_s: float = 90
) -> dict[str, Any]:
    """``interop.js ENDPOINT SCENARIO TOPIC GROUP COUNT``: its JSON answer, or
    ``{"failed": first line of its error}``."""
    from tests.external.node_setup import ensure_node_modules

    package = EXTERNAL / "grpc_node"
    ensure_node_modules(package)
    cmd = ["node", str(package / "interop.js"), endpoint, *args]
    # RocketMQ's proxy raises a long-polling time under 5 s to 5 s and refuses a receive
    # whose deadline cannot cover that (see py_short_polling)
    out = _run(cmd, home / "node", timeout_s, {"AWAIT_MS": "5000"})
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    tail = out.split("exit", 1)[-1].strip().splitlines()
    return {"failed": tail[0][:200] if tail else "no output"}


def cpp_python() -> Path:
    """``.venv-cpp``'s interpreter, made with ``rocketmq`` 0.4.4 if missing (as the
    external tests' fixture does)."""
    python = CPP_VENV / "bin" / "python"
    stamp = CPP_VENV / f".installed-{CPP_PACKAGE}"
    with _CPP_LOCK:
        if not stamp.exists():
            if not python.exists():
                subprocess.run([sys.executable, "-m", "venv", str(CPP_VENV)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", CPP_PACKAGE], check=True, timeout=600
            )
            stamp.touch()
    return python


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def cpp_client(
    script: str, args: list[str], home: Path, timeout_s: float = 90
) -> list[dict[str, Any]]:
    """Run ``tests/external/cpp/SCRIPT.py ARGS`` to its end; its JSON lines."""
    cmd = [str(cpp_python()), str(EXTERNAL / "cpp" / f"{script}.py"), *args]
    return _json_lines(_run(cmd, home / "cpp", timeout_s))


class CppConsumer:
    """``consume.py`` as a running push consumer: :meth:`take` waits for deliveries, then
    stops it (``stop`` on its input)."""

    def __init__(self, args: list[str], home: Path) -> None:
        (home / "cpp").mkdir(parents=True, exist_ok=True)
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [str(cpp_python()), str(EXTERNAL / "cpp" / "consume.py"), *args],
            cwd=ROOT,
            env={**os.environ, "HOME": str(home / "cpp")},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def take(self, count: int, wait_s: float, settle_s: float = 0.0) -> list[dict[str, Any]]:
        """Deliveries once ``count`` arrived (plus ``settle_s`` for any extra) or ``wait_s``
        passed; the consumer is stopped either way."""
        deadline = time.monotonic() + wait_s
        while len(self.lines) < count and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        if settle_s:
            time.sleep(settle_s)  # a bounded look for redeliveries beyond ``count``
        self.stop()
        return list(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
