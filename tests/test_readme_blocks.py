"""The README's command blocks run as written (issue 30, defect 8).

Every ```bash block of README.md that runs ``.venv/bin/rmq`` carries a marker comment on
the line before it saying what it needs::

    <!-- readme-test: single-broker -->  a lone broker: all such blocks, in order, one session
    <!-- readme-test: cluster-up -->     `rmq cluster up`, `. DIR/env`, verbs through it
    <!-- readme-test: by-hand -->        a NameServer and two brokers started by hand
    <!-- readme-test: remoting -->       a broker with a 4.x remoting port
    <!-- readme-test: namesrv -->        a NameServer alone
    <!-- readme-test: external -->       not run here: see EXCLUDED

A block without a marker fails the test, so a new block is never skipped silently, and an
unknown kind fails too. Each kind but ``single-broker`` runs block by block, each block in
a fresh session (its own ports and directory), because the blocks are alternatives that
would take the same ports. A session runs the block's lines in order with bash, as
written, with these substitutions only:

* ``.venv/bin/`` is this venv's bin directory (the directory is not the checkout);
* the README's fixed ports (9876, 8081, 8082, 10911, 2379) in ``127.0.0.1:PORT`` are free
  loopback ports of the session's own, so parallel runs cannot collide; ``rmq cluster up``,
  whose line names no port, is given the same mapping of its defaults (``--namesrv-port``
  …, see ``broker_core/cluster/ports.py``: the README's ports when free) and may still fall
  back to others, which its ``DIR/env`` tells the next lines; ``$RMQ_ENDPOINTS`` points the
  commands without ``--endpoints`` at the mapped 8081, as the default 127.0.0.1:8081 would;
* ``/tmp/`` is the test's own directory.

``rmq cluster up``/``namesrv start``/``broker start`` run in the background until their
``READY`` line and get SIGTERM at the end of the block (exit 0 expected). A line
``. FILE`` (or ``source FILE``) runs in bash and the environment it leaves is carried to
the next lines, as in the user's shell. Every other line must exit 0; checks on what the
lines printed (and, for ``remoting``, on the NameServer while the block's processes run)
follow.

The ``external`` block (``python3 -m venv .venv-cpp && pip install rocketmq==0.4.4``) is
not run: pip needs PyPI and tens of seconds, and ``tests/external/conftest.py``'s
``cpp_python`` fixture makes exactly that venv for ``tests/external/test_cpp_client.py``,
which drives the C++ client through it. ``test_the_external_block_is_what_the_fixture_makes``
checks that the README's line installs the fixture's package into the fixture's venv.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.external.conftest import CPP_PACKAGE, CPP_VENV

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
MARKER = re.compile(r"<!-- readme-test: ([a-z-]+) -->\n```bash\n(.*?)```", re.DOTALL)
BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)
CLI_ENV = ("RMQ_CA_FILE", "RMQ_TLS", "RMQ_NAMESRV", "RMQ_ACCESS_KEY", "RMQ_SECRET_KEY")
READY_WAIT_S = 120  # queue.Empty past this: it hangs before READY
README_PORTS = ("9876", "8081", "8082", "10911", "2379")
LONG_RUNNING = re.compile(r"\brmq (cluster up|namesrv start|broker start)\b")
CLUSTER_UP_FLAGS = {  # cluster up's default ports (the README's), by its options
    "9876": "--namesrv-port",
    "8081": "--grpc-port",
    "10911": "--remoting-port",
    "2379": "--etcd-port",
}
EXCLUDED = {
    "external": "tests/external/test_cpp_client.py, through tests/external/conftest.py's "
    "cpp_python fixture, which makes .venv-cpp with rocketmq 0.4.4",
}


@dataclass(frozen=True)
class Block:
    kind: str
    lines: list[str]  # commands, continuation lines joined


def commands(text: str) -> list[str]:
    """The block's commands: backslash continuations joined, blank lines dropped."""
    joined = re.sub(r"\\\n\s*", "", text)
    return [line for line in joined.splitlines() if line.strip()]


def readme_blocks(text: str) -> list[Block]:
    """The marked blocks in order; AssertionError naming an rmq block without a marker."""
    marked = {m.start(2): Block(m.group(1), commands(m.group(2))) for m in MARKER.finditer(text)}
    for m in BLOCK.finditer(text):
        if ".venv/bin/rmq" in m.group(1):
            assert m.start(1) in marked, f"README block without a readme-test marker:\n{m.group(0)}"
    return [marked[start] for start in sorted(marked)]


def blocks_of(kind: str) -> list[Block]:
    found = [b for b in readme_blocks(README.read_text()) if b.kind == kind]
    assert found, f"README has no {kind!r} block"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Session:
    """One shell-like session: a working directory, an environment, background processes."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.ports = {port: str(free_port()) for port in README_PORTS}
        self.env = {**os.environ, "RMQ_ENDPOINTS": f"127.0.0.1:{self.ports['8081']}"}
        for name in (*CLI_ENV, "RMQ_CONTROLLER"):
            self.env.pop(name, None)
        self.background: list[subprocess.Popen[str]] = []
        self.printed: list[tuple[str, str]] = []  # (README line, what it printed) per line run

    def port(self, readme_port: str) -> str:
        return self.ports[readme_port]

    def as_run(self, line: str) -> str:
        command = line.replace(".venv/bin/", f"{BIN}/").replace("/tmp/", f"{self.cwd}/")
        for port, mine in self.ports.items():
            command = re.sub(rf"127\.0\.0\.1:{port}\b", f"127.0.0.1:{mine}", command)
        flags = " ".join(f"{flag} {self.ports[port]}" for port, flag in CLUSTER_UP_FLAGS.items())
        return command.replace("rmq cluster up ", f"rmq cluster up {flags} ", 1)

    def run(self, line: str) -> None:
        command = self.as_run(line)
        if LONG_RUNNING.search(command):
            self.start(command, line)
        elif line.lstrip().startswith((". ", "source ")):
            self.source(command)
        else:
            self.printed.append((line, self.bash(command, line)))

    @property
    def outputs(self) -> list[str]:
        return [out for _, out in self.printed]

    def printed_by(self, words: str) -> str:
        """What the one line containing ``words`` printed."""
        (out,) = [out for line, out in self.printed if words in line]
        return out

    def bash(self, command: str, line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def source(self, command: str) -> None:
        """Run ``. FILE`` and keep the environment it leaves for the next lines."""
        printed = self.bash(f"set -e\n{command}\nenv -0", command)  # the line may end in a comment
        self.env = dict(item.split("=", 1) for item in printed.split("\0") if "=" in item)
        assert "PATH" in self.env, printed

    def start(self, command: str, line: str) -> None:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a kill at the end reaches cluster up's children
        )
        self.background.append(proc)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=read_lines, args=(proc, lines), daemon=True).start()
        seen = []
        while (out := lines.get(timeout=READY_WAIT_S)) is not None:  # READY once it serves
            seen.append(out)
            if out.startswith("READY"):
                self.printed.append((line, "".join(seen)))
                return
        raise AssertionError(f"{line} ended before READY:\n{''.join(seen)}")

    def stop(self) -> None:
        """SIGTERM, newest first; each must exit 0 (SIGKILL its group if it hangs)."""
        codes = []
        for proc in reversed(self.background):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                codes.append(proc.wait(60))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                codes.append(proc.wait(10))
        assert all(code == 0 for code in codes), f"background exit codes {codes}"


def read_lines(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Every line ``proc`` prints, then None; read to the end, so the pipe never fills."""
    assert proc.stdout is not None
    for out in proc.stdout:
        lines.put(out)
    lines.put(None)


Check = Callable[[Session], None]


def run_blocks(blocks: list[Block], cwd: Path, check: Check | None = None) -> Session:
    """Run ``blocks`` in order in one session; ``check`` runs before the stop."""
    session = Session(cwd)
    try:
        for block in blocks:
            for line in block.lines:
                session.run(line)
        if check is not None:
            check(session)
    finally:
        session.stop()
    return session


def run_each(blocks: list[Block], cwd: Path, check: Check | None = None) -> list[Session]:
    """Every block in a fresh session of its own (a directory each under ``cwd``)."""
    sessions = []
    for i, block in enumerate(blocks):
        (cwd / str(i)).mkdir()
        sessions.append(run_blocks([block], cwd / str(i), check))
    return sessions


RUNNERS: dict[str, Callable[[list[Block], Path], object]] = {
    "single-broker": run_blocks,
    "cluster-up": run_each,
    "by-hand": run_each,
    "remoting": run_each,
    "namesrv": run_each,
}


def column(text: str, name: str) -> list[str]:
    """The non-empty cells of table column ``name`` (by its header) in a rich table."""
    headers = [line for line in text.splitlines() if line.startswith("┃")]
    index = next(
        i
        for line in headers
        for i, cell in enumerate(line.strip("┃").split("┃"))
        if cell.strip() == name
    )
    rows = [line.strip("│").split("│") for line in text.splitlines() if line.startswith("│")]
    return [cells[index].strip() for cells in rows if cells[index].strip()]


def assert_two_groups(session: Session, groups: list[str]) -> None:
    """cluster list shows both groups, the route 4 read queues on each, and the message
    sent came back from consume (its body as sent)."""
    assert sorted(column(session.printed_by("rmq cluster list"), "broker")) == groups
    route = session.printed_by("rmq topic route orders")
    assert column(route, "broker") == groups
    assert column(route, "read queues") == ["4", "4"]
    assert '{"id": 1}' in session.printed_by("rmq consume orders --group billing")
    progress = session.printed_by("rmq group progress billing")
    assert progress.startswith("group billing (total lag 0)"), progress
    assert column(progress, "consumer offset") == ["1"], progress  # the one message, committed


def test_every_rmq_block_is_marked_and_known() -> None:
    kinds = {b.kind for b in readme_blocks(README.read_text())}
    assert kinds == set(RUNNERS) | set(EXCLUDED), "a kind without a runner, or one unused"


def test_the_extractor_refuses_an_unmarked_block() -> None:
    text = "x\n```bash\n.venv/bin/rmq topic list\n```\n"
    with pytest.raises(AssertionError, match="without a readme-test marker"):
        readme_blocks(text)
    marked = "<!-- readme-test: single-broker -->\n```bash\n.venv/bin/rmq a \\\n  b\n\n```\n"
    assert readme_blocks(marked) == [Block("single-broker", [".venv/bin/rmq a b"])]


def test_the_substitutions_are_only_venv_ports_and_tmp(tmp_path: Path) -> None:
    session = Session(tmp_path)
    line = ".venv/bin/rmq broker start --listen 127.0.0.1:8081 --store-dir /tmp/a --x 18081"
    p = session.port("8081")
    want = f"{BIN}/rmq broker start --listen 127.0.0.1:{p} --store-dir {tmp_path}/a --x 18081"
    assert session.as_run(line) == want
    up = session.as_run(".venv/bin/rmq cluster up --brokers 2   # comment")
    assert f"--namesrv-port {session.port('9876')} " in up.split("#")[0]


def test_single_broker_blocks_run_as_written(tmp_path: Path) -> None:
    session = run_blocks(blocks_of("single-broker"), tmp_path)
    text = "\n".join(session.outputs)
    assert '{"id": 1}' in text  # the README's message came back from `rmq consume`
    assert (tmp_path / ".rocketmq" / "store").is_dir()  # its --store-dir, relative to here


def test_cluster_up_block_runs_as_written(tmp_path: Path) -> None:
    (session,) = run_each(blocks_of("cluster-up"), tmp_path)
    assert_two_groups(session, ["broker-a", "broker-b"])
    assert session.env["RMQ_NAMESRV"].startswith("127.0.0.1:")  # `. DIR/env` took effect
    assert not (tmp_path / "0" / "rmq-cluster" / "env").exists()  # removed at the stop


def test_by_hand_block_runs_as_written(tmp_path: Path) -> None:
    (session,) = run_each(blocks_of("by-hand"), tmp_path)
    assert_two_groups(session, ["a", "b"])
    assert (tmp_path / "0" / "a").is_dir() and (tmp_path / "0" / "b").is_dir()


def test_remoting_block_registers_the_remoting_port(tmp_path: Path) -> None:
    from broker_core.namesrv.client import NameServerClient

    def check(session: Session) -> None:
        client = NameServerClient(f"127.0.0.1:{session.port('9876')}")
        try:
            route = client.get_route("orders")
        finally:
            client.close()
        assert [b.broker_addrs for b in route.broker_datas] == [
            {0: f"127.0.0.1:{session.port('10911')}"}
        ]
        assert [q.read_queue_nums for q in route.queue_datas] == [4]

    run_each(blocks_of("remoting"), tmp_path, check)


def test_namesrv_block_prints_what_it_says(tmp_path: Path) -> None:
    (block,) = blocks_of("namesrv")
    (session,) = run_each([block], tmp_path)
    said = re.search(r"# prints (READY \S+)", block.lines[0])
    assert said is not None
    (printed,) = session.outputs  # its log lines (stderr), then READY
    assert printed.splitlines()[-1] == session.as_run(said.group(1))


def test_the_external_block_is_what_the_fixture_makes() -> None:
    """The pip block is covered by the test named in EXCLUDED, not run here."""
    (block,) = blocks_of("external")
    assert block.lines[0].startswith(f"python3 -m venv {CPP_VENV.name} && ")
    assert f"{CPP_VENV.name}/bin/pip install {CPP_PACKAGE}" in block.lines[0]
