"""``rmq cluster up`` as a child process, for tests: its printed lines, read as they come.

``ClusterUp.start(tmp_path, *flags)`` runs ``rmq cluster up --dir DIR FLAGS`` on free
ports (``--namesrv-port 0`` …, unless a flag says otherwise) and returns once it printed
``READY``; ``printed`` maps each line's first word to the rest of its lines, and every
later line lands in ``lines`` (``wait_line`` awaits one). ``stop()`` sends SIGTERM and
returns the exit code; a test's ``finally`` calls ``kill()``, which leaves no process
behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_core.server.launcher import ROOT

RMQ = [sys.executable, "-c", "from broker_core.cli import main; main()"]
FREE_PORTS = ["--namesrv-port", "0", "--grpc-port", "0", "--remoting-port", "0", "--etcd-port", "0"]


@dataclass
class ClusterUp:
    process: subprocess.Popen[str]
    directory: Path
    printed: dict[str, list[str]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def start(cls, directory: Path, *flags: str, env: dict[str, str] | None = None) -> ClusterUp:
        args = [*FREE_PORTS, "--register-interval-ms", "500", *flags]
        proc = subprocess.Popen(
            [*RMQ, "cluster", "up", "--dir", str(directory), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # kill() reaches its children too
        )
        up = cls(proc, directory)
        threading.Thread(target=up._drain, daemon=True).start()
        up.wait_line(lambda line: line == "READY", 120, "READY")
        for line in up.lines[: up.lines.index("READY")]:
            word, _, rest = line.partition(" ")
            up.printed.setdefault(word, []).append(rest)
        return up

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<EOF>")
            self._changed.notify_all()

    def wait_line(self, match: Any, timeout_s: float, what: str) -> str:
        """The first line (from the start) ``match`` accepts; AssertionError at EOF or on
        timeout, with what was printed."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self.lines:
                    if match(line):
                        return line
                if "<EOF>" in self.lines or time.monotonic() > deadline:
                    raise AssertionError(f"no line {what}; printed:\n" + "\n".join(self.lines))
                self._changed.wait(0.5)

    def endpoints(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.directory / "endpoints.json").read_text())
        return doc

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)

    def kill(self) -> None:
        """Stop it (SIGTERM, stopping its children), else SIGKILL its whole process group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
                return
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
