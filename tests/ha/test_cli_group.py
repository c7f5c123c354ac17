"""``rmq broker start`` with the broker-group flags: a master and a slave from the command
line, and the clear errors of a wrong combination."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.client import RocketMQClient
from tests.ha.conftest import pull_all, wait_until

RMQ = Path(sys.executable).with_name("rmq")


@contextmanager
def rmq_broker(store: Path, *flags: str) -> Iterator[dict[str, str]]:
    """``rmq broker start`` until READY; yields its READY and HA_LISTEN addresses."""
    proc = subprocess.Popen(
        [str(RMQ), "broker", "start", "--listen", "127.0.0.1:0", "--store-dir", str(store), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        seen: dict[str, str] = {}
        for line in proc.stdout:
            word, _, rest = line.partition(" ")
            if word in ("READY", "HA_LISTEN"):
                seen[word] = rest.strip()
            if word == "READY":
                break
        assert "READY" in seen, "rmq broker start exited before READY"
        yield seen
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_a_group_from_the_command_line(tmp_path: Path) -> None:
    with (
        rmq_broker(
            tmp_path / "m",
            "--broker-id",
            "0",
            "--ha-listen",
            "127.0.0.1:0",
            "--replication",
            "sync",
        ) as master,
        rmq_broker(tmp_path / "s", "--broker-id", "1", "--ha-master", master["HA_LISTEN"]) as slave,
        RocketMQClient(master["READY"], max_attempts=1) as to_master,
        RocketMQClient(slave["READY"], max_attempts=1) as to_slave,
    ):
        to_master.create_topic("cli-ha", queues=1)
        wait_until(lambda: to_master.health()["replication"]["in_sync"] != {})
        to_master.send("cli-ha", b"replicated")
        wait_until(lambda: "cli-ha" in {t["name"] for t in to_slave.list_topics()})
        wait_until(lambda: pull_all(to_slave, "cli-ha", 1) == [b"replicated"])
        assert to_slave.health()["replication"]["role"] == "slave"
        shown = CliRunner(env={"COLUMNS": "200"}).invoke(
            cli, ["broker", "replication", "--endpoints", master["READY"]]
        )
        assert shown.exit_code == 0, shown.output
        assert re.search(r"role\s*│\s*master", shown.output)
        assert re.search(r"127\.0\.0\.1:\d+\s*│\s*\d+\s*│\s*yes", shown.output), shown.output
        shown = CliRunner(env={"COLUMNS": "200"}).invoke(
            cli, ["broker", "replication", "--endpoints", slave["READY"]]
        )
        assert re.search(r"master\s*│\s*" + re.escape(master["HA_LISTEN"]), shown.output)


def test_wrong_group_flags_fail_with_one_clear_line(tmp_path: Path) -> None:
    cases = [
        (["--broker-id", "1"], "needs ha_master (--ha-master HOST:PORT)"),
        (["--ha-listen", "nope"], "ha_listen must be HOST:PORT"),
        (["--ha-master", "127.0.0.1:1"], "ha_master is for slaves"),
    ]
    for flags, words in cases:
        done = subprocess.run(
            [
                str(RMQ),
                "broker",
                "start",
                "--listen",
                "127.0.0.1:0",
                "--store-dir",
                str(tmp_path / "x"),
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("Error:") and words in last, done.stderr
