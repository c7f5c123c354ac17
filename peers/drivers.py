"""Run our Java drivers (``peers/java/*.java``, JDK single-file mode) and mqadmin.

* ``client5(endpoint, args, home)`` runs ``Client5.java`` (rocketmq-client-java 5.x, gRPC)
* ``client4(namesrv, args, home)`` runs ``Client4.java`` (rocketmq-client, the 4.x API)
* ``mqadmin(namesrv, args, home)`` runs ``MQAdminStartup`` and returns what it printed

Each driver is compiled once into ``.peers/classes/NAME/`` (again when its source is newer)
rather than run in single-file source mode, which would compile it on every run.
The drivers print one JSON object per line (``{"event": ...}``); :func:`client5` and
:func:`client4` return those objects as a :class:`Run` (their other output — the client's
own log lines — is kept in ``other``). Every JVM gets a small heap and ``user.home`` =
``home``, so the clients' logs land there and not in the user's home. A run that outlives
``timeout_s`` is killed and raises :class:`DriverError`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from peers.rocketmq import CACHE, CLIENT5_CLASSPATH, SERVER_CLASSPATH, ensure_fetched

JAVA_DIR = Path(__file__).resolve().parent / "java"
CLASSES = CACHE.parent / "classes"
_COMPILE_LOCK = threading.Lock()
CLIENT_JVM = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


class DriverError(RuntimeError):
    """A driver or mqadmin run that did not finish in time (its output in the message)."""


@dataclass
class Run:
    events: list[dict[str, object]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def of(self, event: str) -> list[dict[str, object]]:
        return [e for e in self.events if e.get("event") == event]

    @property
    def error(self) -> dict[str, object] | None:
        errors = self.of("error")
        return errors[0] if errors else None


def _java(classpath: str, main: list[str], home: Path, timeout_s: float) -> str:
    ensure_fetched()
    home.mkdir(parents=True, exist_ok=True)
    cmd = ["java", *CLIENT_JVM, f"-Duser.home={home}", "-cp", classpath, *main]
    env = {**os.environ, "ROCKETMQ_HOME": str(home)}
    env.pop("CLASSPATH", None)
    try:
        done = subprocess.run(
            cmd, cwd=home, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        raise DriverError(
            f"{' '.join(main[:3])} ran over {timeout_s:.0f} s:\n{out[-2000:]}"
        ) from None
    # mqadmin prints a failed command's exception to stderr and still exits 0
    tail = "" if done.returncode == 0 else f"\nexit {done.returncode}"
    return done.stdout + done.stderr + tail


def compiled(name: str, classpath: str) -> str:
    """The class path running driver ``name`` (``peers/java/NAME.java``), compiled if needed."""
    ensure_fetched()
    source, out = JAVA_DIR / f"{name}.java", CLASSES / name
    with _COMPILE_LOCK:
        done = out / f"{name}.class"
        if not done.exists() or done.stat().st_mtime < source.stat().st_mtime:
            CLASSES.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=CLASSES))
            cmd = ["javac", "-nowarn", "-d", str(tmp), "-cp", classpath, str(source)]
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise DriverError(f"javac {source.name} failed:\n{result.stderr[-3000:]}")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
    return f"{out}{os.pathsep}{classpath}"


def _parse(text: str) -> Run:
    run = Run()
    for line in text.splitlines():
        if line.startswith('{"event"'):
            run.events.append(json.loads(line))
        elif line.strip():
            run.other.append(line)
    return run


def client5(endpoint: str, args: list[str], home: Path, timeout_s: float = 120) -> Run:
    classpath = compiled("Client5", CLIENT5_CLASSPATH)
    return _parse(_java(classpath, ["Client5", endpoint, *args], home, timeout_s))


def client4(namesrv: str, args: list[str], home: Path, timeout_s: float = 120) -> Run:
    classpath = compiled("Client4", SERVER_CLASSPATH)
    return _parse(_java(classpath, ["Client4", namesrv, *args], home, timeout_s))


def mqadmin(namesrv: str, args: list[str], home: Path, timeout_s: float = 60) -> str:
    """``mqadmin COMMAND -n namesrv ARGS...`` (``args[0]`` is the command); stdout and
    stderr. mqadmin's own RPC deadline is a few seconds, which a starved shared machine
    misses: a run that failed with a remoting timeout (nothing answered in time; the
    commands used here are idempotent), or a JVM that printed nothing at all (seen once
    at a load average of 50), is run again, at most twice more."""
    main = ["org.apache.rocketmq.tools.command.MQAdminStartup", args[0], "-n", namesrv, *args[1:]]
    for _ in range(2):
        out = _java(SERVER_CLASSPATH, main, home, timeout_s)
        if "RemotingTimeoutException" not in out and out.strip() and "exit " not in out[-12:]:
            return out
    return _java(SERVER_CLASSPATH, main, home, timeout_s)
