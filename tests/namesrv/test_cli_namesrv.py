"""``rmq namesrv start``: ready line, serving, clean stop on SIGTERM, bad flags."""

from __future__ import annotations

import signal
import subprocess
import sys

from broker_core.namesrv.client import NameServerClient
from tests.cluster_procs import ROOT, wait_accepting

RMQ = [sys.executable, "-c", "from broker_core.cli import main; main()"]


def test_rmq_namesrv_start_serves_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [*RMQ, "namesrv", "start", "--listen", "127.0.0.1:0", "--scan-interval-ms", "200"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY 127.0.0.1:")
        addr = line.split()[1]
        wait_accepting(addr)
        client = NameServerClient(addr)
        assert client.get_all_topics() == []
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        proc.kill()
        proc.wait(15)


def test_rmq_namesrv_start_rejects_a_bad_address_in_one_line():
    result = subprocess.run(
        [*RMQ, "namesrv", "start", "--listen", "nowhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "Error: bad address 'nowhere': expected HOST:PORT"


def test_rmq_namesrv_start_reports_a_busy_port():
    first = subprocess.Popen(
        [*RMQ, "namesrv", "start", "--listen", "127.0.0.1:0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert first.stdout is not None
        addr = first.stdout.readline().split()[1]
        result = subprocess.run(
            [*RMQ, "namesrv", "start", "--listen", addr],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        assert result.stderr.startswith(f"Error: cannot listen on {addr}")
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(15)
