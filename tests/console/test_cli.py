"""``rmq console``: serves on the address given and prints its URL; a busy address is one
``Error:`` line and exit status 1."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from broker_core.cli import cli
from broker_core.cli_console import console_for_cluster


def test_rmq_console_prints_its_url_and_serves(tmp_path: Path) -> None:
    # run from elsewhere: the installed package serves (./dev's editable install links files)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from broker_core.cli import main; main()",
            "console",
            "--listen",
            "127.0.0.1:0",
            "--endpoints",
            "127.0.0.1:1",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("console: http://127.0.0.1:"), line
        url = line.split()[1]
        for asset in ("static/console.css", "vendor/chart.umd.js"):
            with urllib.request.urlopen(url + asset, timeout=10) as response:
                assert response.status == 200, asset
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_a_busy_listen_address_is_one_error_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(
            cli, ["console", "--listen", f"127.0.0.1:{port}", "--endpoints", "127.0.0.1:1"]
        )
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: console cannot listen on 127.0.0.1:{port}")


def test_console_for_cluster_starts_and_stops() -> None:
    started = console_for_cluster("127.0.0.1:1")
    assert started is not None
    url, stop = started
    try:
        with urllib.request.urlopen(url + "static/console.js", timeout=10) as response:
            assert response.status == 200
    finally:
        stop()
