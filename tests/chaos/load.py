"""Shared machinery of the chaos tests: a restartable broker, an ack log, read-back, stats.

* :class:`ChaosBroker` runs ``python -m broker_core.server`` on one fixed loopback port
  and one store directory, so it can be SIGKILLed and started again where clients
  expect it (they reconnect by themselves).
* :class:`AckLog` records what a producer was told was stored: the test's ground truth,
  also kept as a ``tests.history.History`` (every send invoked, every ack) for the checker.
  A failure must be one a broker restart explains (``send_loop.restart_explains``), else
  ``record_failure`` raises; each is kept with its time, so a test checks it came around
  a kill (:func:`outside_restarts`). ``AckLog.send_until`` runs a numbered send loop into
  it (``tests/send_loop.py``).
* :func:`kill_cycles` SIGKILLs and restarts the broker as a :class:`KillPlan` says.
* :func:`read_back` reads every queue of a topic by offset, checking no offset is skipped.
* :func:`process_stats` and :func:`open_fd_kinds` sample a process's memory and open
  descriptors from ``/proc``, telling the store's mapped files apart from the rest.
"""

from __future__ import annotations

import os
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from broker_core.client import ReceivedMessage, RocketMQClient
from broker_core.server.launcher import BrokerProcess, launch_broker
from tests.history import History, Op
from tests.send_loop import UnexplainedFailure, restart_explains, send_numbered
from tests.server.conftest import DEFAULT_CONFIG

READER_GROUP = "chaos-reader"
PULL_BATCH = 1_024  # the broker's max_pull_batch


def free_port() -> int:
    """A loopback port nobody listens on right now (the broker binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def merged_config(config: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The server tests' defaults with ``config``'s tables laid over them."""
    merged = {table: dict(values) for table, values in DEFAULT_CONFIG.items()}
    for table, values in (config or {}).items():
        merged.setdefault(table, {}).update(values)
    return merged


class ChaosBroker:
    """One broker identity (port, store, config) that can be killed and restarted.

    ``start`` launches a process and returns once it accepts calls; ``kill`` is SIGKILL
    (no flush, no checkpoint, the ``abort`` marker stays); ``stop`` is SIGTERM and
    returns the exit code. Every process's output is kept in ``outputs``.
    """

    def __init__(
        self, workdir: Path, *, flush: str, config: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.workdir = workdir
        self.flush = flush
        self.config = merged_config(config)
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc: BrokerProcess | None = None
        self.outputs: list[list[str]] = []
        self.ready_s: list[float] = []  # when each start accepted calls (time.monotonic())

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("broker not started")
        return self.proc.process.pid

    def start(self) -> BrokerProcess:
        self.proc = launch_broker(
            self.workdir, flush=self.flush, config=self.config, listen=self.endpoint
        )
        self.outputs.append(self.proc.output)
        self.ready_s.append(time.monotonic())
        return self.proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.process.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def stop(self) -> int:
        if self.proc is None:
            return 0
        return self.proc.stop()

    def log_tail(self, lines: int = 40) -> str:
        return "".join(self.outputs[-1][-lines:]) if self.outputs else ""

    def recovery_summaries(self) -> list[str]:
        """The ``store opened: ...`` line of every start (what recovery found and did)."""
        found = []
        for output in self.outputs:
            found += [
                line.split("store opened: ", 1)[1].strip()
                for line in output
                if "store opened: " in line
            ]
        return found


_DROPPED = re.compile(r"dropped (\d+) bytes")


def dropped_bytes(summaries: list[str]) -> int:
    """Commitlog bytes recovery truncated, summed over the given recovery summaries."""
    return sum(int(m.group(1)) for s in summaries for m in _DROPPED.finditer(s))


@dataclass(frozen=True, slots=True)
class Ack:
    message_id: str
    acked_at_s: float  # time.monotonic() when the send returned OK


@dataclass
class AckLog:
    """Bodies a producer was told are stored; thread-safe; waitable by count."""

    acks: dict[bytes, Ack] = field(default_factory=dict)
    failed_sends: Counter[str] = field(default_factory=Counter)  # by exception class
    failures: list[tuple[float, BaseException]] = field(default_factory=list)  # (when, what)
    history: History = field(default_factory=History)
    _ops: dict[bytes, Op] = field(default_factory=dict)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def invoke(self, bodies: Sequence[bytes]) -> None:
        """Sends of ``bodies`` begin (an op left without an outcome counts as unknown)."""
        ops = {body: self.history.invoke(body.decode()) for body in bodies}
        with self._cond:
            self._ops.update(ops)

    def record(self, body: bytes, message_id: str) -> None:
        with self._cond:
            self.acks[body] = Ack(message_id, time.monotonic())
            op = self._ops.pop(body, None)
            self._cond.notify_all()
        if op is not None:
            self.history.ok(op)

    def record_failure(self, exc: BaseException) -> None:
        """A failed send: kept with its time; raises ``UnexplainedFailure`` unless a broker
        restart explains it."""
        with self._cond:
            self.failed_sends[type(exc).__name__] += 1
            self.failures.append((time.monotonic(), exc))
        if not restart_explains(exc):
            raise UnexplainedFailure(f"a send failed unexplained by a restart: {exc!r}") from exc

    def count(self) -> int:
        with self._cond:
            return len(self.acks)

    def wait_for_count(self, target: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.acks) >= target, timeout_s)

    def snapshot(self) -> dict[bytes, Ack]:
        with self._cond:
            return dict(self.acks)

    def send_until(
        self,
        stop: threading.Event,
        prefix: bytes,
        send: Callable[[bytes], str],
        retry_pause_s: float,
    ) -> None:
        """``send_numbered`` into this log: ``send(body)`` returns the body's message id."""

        def on_ack(body: bytes, _started_s: float, message_id: str) -> None:
            self.record(body, message_id)

        def invoked(body: bytes) -> str:
            self.invoke([body])
            return send(body)

        send_numbered(stop, prefix, invoked, on_ack, self.record_failure, retry_pause_s)


@dataclass(frozen=True, slots=True)
class KillPlan:
    kills: int
    min_acks: int  # acknowledgements between a restart and the next kill: drawn from
    max_acks: int  # [min_acks, max_acks]
    ack_timeout_s: float = 60.0  # how long those acknowledgements may take


def outside_restarts(
    failures: list[tuple[float, BaseException]],
    kills: list[float],
    ready: list[float],
    grace_s: float,
) -> list[tuple[float, BaseException]]:
    """Failures not raised between a kill and ``grace_s`` after the restart that followed
    it was ready (``ready[i]`` is when the broker killed at ``kills[i]`` accepted calls)."""
    windows = list(zip(kills, ready, strict=True))
    return [f for f in failures if not any(k <= f[0] <= r + grace_s for k, r in windows)]


def kill_cycles(broker: ChaosBroker, plan: KillPlan, acks: AckLog, seed: int) -> list[float]:
    """SIGKILL and restart ``broker`` ``plan.kills`` times under load, each after a seeded
    random number of new acknowledgements and a few ms of jitter (to land between two
    acknowledgements, not on one); returns the kill times (``time.monotonic()``)."""
    rng = random.Random(seed)
    kills: list[float] = []
    for cycle in range(plan.kills):
        target = acks.count() + rng.randint(plan.min_acks, plan.max_acks)
        assert acks.wait_for_count(target, plan.ack_timeout_s), (
            f"cycle {cycle}: acknowledgements stalled at {acks.count()} (wanted {target})\n"
            + broker.log_tail()
        )
        time.sleep(rng.uniform(0, 0.03))
        assert broker.alive(), f"broker died on its own in cycle {cycle}\n{broker.log_tail()}"
        kills.append(time.monotonic())  # before the signal: clients see it before wait() ends
        acks.history.fault(f"kill {cycle}")
        broker.kill()
        broker.start()
    return kills


def read_back(client: RocketMQClient, topic: str) -> list[ReceivedMessage]:
    """Every message of every queue of ``topic``, from each queue's minimum to its maximum.

    Fails if a pull returns offsets that are not exactly the next ones: a read never
    skips a stored message, and an offset below the maximum is always readable.
    """
    found: list[ReceivedMessage] = []
    # a cluster member's route lists every group's queues: each id is read here once
    for queue_id in sorted({queue.queue_id for queue in client.query_route(topic)}):
        low = client.query_offset(topic, queue_id, "BEGINNING")
        high = client.query_offset(topic, queue_id, "END")
        offset = low
        while offset < high:
            batch = client.pull(
                READER_GROUP,
                topic,
                queue_id,
                offset,
                min(PULL_BATCH, high - offset),
                with_bounds=False,
            )
            got = [m.queue_offset for m in batch.messages]
            if got != list(range(offset, offset + len(got))) or not got:
                raise AssertionError(
                    f"{topic}:{queue_id} from {offset} (max {high}) returned offsets {got[:5]}..."
                )
            found += batch.messages
            offset = batch.next_offset
    return found


@dataclass(frozen=True, slots=True)
class Audit:
    """Acknowledged messages against what the broker serves."""

    acknowledged: int
    stored: int
    lost: list[bytes]
    duplicates: int  # extra copies of a body (a retried send stored twice)
    unacked_stored: int  # stored although the sender saw a failure (at least once)


def audit(acks: dict[bytes, Ack], messages: list[ReceivedMessage]) -> Audit:
    """Which acknowledged bodies are missing, and how many extra copies were stored.

    An acknowledged body counts as present only if a stored copy carries the message id
    the producer was given.
    """
    ids: dict[bytes, set[str]] = {}
    for m in messages:
        ids.setdefault(m.body, set()).add(m.message_id)
    copies = Counter(m.body for m in messages)
    lost = sorted(body for body, ack in acks.items() if ack.message_id not in ids.get(body, ()))
    return Audit(
        acknowledged=len(acks),
        stored=len(messages),
        lost=lost,
        duplicates=sum(n - 1 for n in copies.values()),
        unacked_stored=sum(1 for body in copies if body not in acks),
    )


@dataclass(frozen=True, slots=True)
class ProcessStats:
    rss_bytes: int  # VmRSS: anonymous + file-backed (mapped store segments) + shmem
    anon_bytes: int  # RssAnon: heap and stacks, where a leak shows
    file_bytes: int  # RssFile: pages of mapped files (grows with the store by design)
    open_fds: int
    store_fds: int  # open on files of the store (each mapped file holds one: mmap dups it)

    @property
    def other_fds(self) -> int:
        """Sockets, pipes, logs...: what a leak of connections or handles would grow."""
        return self.open_fds - self.store_fds

    def as_dict(self) -> dict[str, int]:
        return {
            "rss_bytes": self.rss_bytes,
            "anon_bytes": self.anon_bytes,
            "file_bytes": self.file_bytes,
            "open_fds": self.open_fds,
            "store_fds": self.store_fds,
        }


def _fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except FileNotFoundError:  # closed while we looked
            continue
    return targets


def process_stats(pid: int, store_dir: Path) -> ProcessStats:
    """Memory (``/proc/PID/status``) and open file descriptors (``/proc/PID/fd``)."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0]) * 1024
    targets = _fd_targets(pid)
    prefix = f"{store_dir.resolve()}/"
    in_store = sum(1 for t in targets if t.startswith(prefix))
    return ProcessStats(
        fields["VmRSS"], fields["RssAnon"], fields["RssFile"], len(targets), in_store
    )


def open_fd_kinds(pid: int, store_dir: Path) -> dict[str, int]:
    """Open descriptors by kind: sockets, pipes, anon inodes, other files, and store files
    by store directory (``store/commitlog``...)."""
    kinds: Counter[str] = Counter()
    root = store_dir.resolve()
    for target in _fd_targets(pid):
        if target.startswith(f"{root}/"):
            kinds["store/" + Path(target).relative_to(root).parts[0]] += 1
        elif target.startswith("/"):
            kinds["file"] += 1
        else:
            kinds[target.split(":", 1)[0]] += 1
    return dict(sorted(kinds.items()))


def mapped_store_files(store_dir: Path) -> int:
    """Files in the store's data directories (commitlog, consume queues, index, timer):
    the files a broker keeps mapped. Top-level files and ``config/`` are not mapped."""
    return sum(
        1
        for p in store_dir.rglob("*")
        if p.is_file() and p.parent != store_dir and p.relative_to(store_dir).parts[0] != "config"
    )


def wait_until(
    predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05
) -> Any:
    """Poll ``predicate`` until it is truthy (for effects nothing signals: a broker's
    disk check, a consumer in another thread); AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def budgets(
    short: int, full: int, *, suppress: Sequence[HealthCheck] = (HealthCheck.too_slow,)
) -> list[Any]:
    """The two runs of a hypothesis property: short and derandomized (normal suite), wide
    (``slow``, run by ``./dev chaos``)."""
    common: dict[str, Any] = {"deadline": None, "suppress_health_check": list(suppress)}
    return [
        pytest.param(
            settings(max_examples=short, derandomize=True, database=None, **common), id="short"
        ),
        pytest.param(settings(max_examples=full, **common), id="full", marks=pytest.mark.slow),
    ]
