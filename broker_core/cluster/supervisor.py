"""Keep a local cluster serving while one of its processes dies (``rmq cluster up``).

:class:`Supervisor` polls every child of a :class:`~broker_core.cluster.local.LocalCluster`
every ``poll_s``. A broker that exited is reported once (``exited KEY CODE`` on stdout,
its last output lines on stderr) and, with ``restart``, started again on its own ports
and store (``restarted KEY ENDPOINT``); the others keep serving either way. A dead
NameServer or etcd is reported too (not restarted: the brokers' registration and the
controller retry on their own, and a user sees why). Only ``stop`` (Ctrl-C/SIGTERM in
the CLI) ends :meth:`Supervisor.run`; stopping the cluster is the caller's part.

A controller-mode broker that changes role restarts itself in the same process (same
pid), so that is no exit and is not reported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from subprocess import Popen
from typing import Any

from broker_core.cluster.local import LocalCluster

Say = Callable[[str, bool], None]  # (line, to stderr)


@dataclass
class Supervisor:
    """See the module docstring. ``on_change`` runs after a restart (rewrite files)."""

    local: LocalCluster
    say: Say
    restart: bool = False
    poll_s: float = 0.5
    on_change: Callable[[], object] | None = None
    _reported: set[int] = field(default_factory=set)  # pids already reported dead

    def run(self, stop: threading.Event) -> None:
        """Check every ``poll_s`` until ``stop`` is set."""
        while not stop.wait(self.poll_s):
            self.check_once(stop)

    def check_once(self, stop: threading.Event | None = None) -> list[str]:
        """Report (and restart) what died since the last check; returns their keys."""
        dead = []
        for key, proc in list(self.local.brokers.items()):
            if self._newly_dead(proc.process):
                dead.append(key)
                self._report(key, proc.process.returncode, proc.output)
                if self.restart and not (stop is not None and stop.is_set()):
                    self._restart(key)
        for what, child in (
            ("namesrv", self.local.namesrv_process),
            ("etcd", self.local.etcd_process),
        ):
            if child is not None and self._newly_dead(child):
                dead.append(what)
                self.say(f"exited {what} {child.returncode}", False)
        return dead

    def _newly_dead(self, process: Popen[Any]) -> bool:
        if process.poll() is None or process.pid in self._reported:
            return False
        self._reported.add(process.pid)
        return True

    def _report(self, key: str, code: int | None, output: list[str]) -> None:
        self.say(f"exited {key} {code}", False)
        tail = "".join(output[-20:])
        self.say(
            f"--- {key} exited with code {code}; the others keep serving. Last output:\n{tail}",
            True,
        )

    def _restart(self, key: str) -> None:
        try:
            proc = self.local.restart(key)
        except RuntimeError as exc:
            self.say(f"--- restarting {key} failed: {exc}", True)
            return
        self.say(f"restarted {key} {proc.endpoint}", False)
        if self.on_change is not None:
            self.on_change()
