"""Stopping a broker after bad gRPC input: undecodable Telemetry frames, and a SIGTERM
taken by a gRPC thread rather than the main one (cases found by the gRPC fuzz,
``test_fuzz_grpc.py``)."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from tests.chaos.grpc_fuzz import CLIENT_ID, SERVICE, STREAM_DEADLINE_S, stop_cleanly
from tests.server.conftest import start_broker


def test_undecodable_telemetry_frames_do_not_wedge_shutdown(tmp_path: Path) -> None:
    """gRPC ends such a call itself; the handler must not leave it unfinished (a SIGTERM
    then waited forever for it: grpcio sends a second status the core refuses)."""
    proc = start_broker(tmp_path)
    try:
        with grpc.insecure_channel(proc.endpoint) as channel:
            telemetry = channel.stream_stream(f"/{SERVICE.full_name}/Telemetry")
            for frames in ([b"\xff"], [b"\x1f\x84"] * 3, [b"\x0a\x05\xff"]) * 4:
                with pytest.raises(grpc.RpcError) as refused:
                    list(
                        telemetry(
                            iter(frames),
                            timeout=STREAM_DEADLINE_S,
                            metadata=[("x-mq-client-id", CLIENT_ID)],
                        )
                    )
                assert refused.value.code() == grpc.StatusCode.INTERNAL
    finally:
        stop_cleanly(proc, timeout_s=15)
    assert any("stopped cleanly" in line for line in proc.output)


TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


@pytest.mark.skipif(sys.platform != "linux" or TGKILL is None, reason="needs Linux tgkill")
def test_sigterm_taken_by_any_thread_stops_the_broker(tmp_path: Path) -> None:
    """The kernel gives a process-directed SIGTERM to any thread that does not block it;
    under load that is often a gRPC thread. One such SIGTERM hung a broker in the slow
    corrupt-files run; tgkill makes the case deterministic."""
    proc = start_broker(tmp_path)
    pid = proc.process.pid
    names = {
        int(t): Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
        for t in os.listdir(f"/proc/{pid}/task")
    }
    grpc_threads = [t for t, name in names.items() if name.startswith(("grpc", "event_engine"))]
    wait_until_idle(pid)  # else the main thread may still see the signal on its way to wait
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(TGKILL, pid, grpc_threads[0], signal.SIGTERM) == 0
    try:
        assert proc.process.wait(3) == 0  # a clean stop takes well under a second
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the broker ignored a SIGTERM taken by a non-main thread")


def wait_until_idle(pid: int, steady_polls: int = 20) -> None:
    """Until the main thread has sat in a futex wait (its ``stop.wait()``) for a while."""
    deadline, steady = time.monotonic() + 10, 0
    while steady < steady_polls:
        assert time.monotonic() < deadline, "the broker's main thread never went idle"
        steady = steady + 1 if "futex" in Path(f"/proc/{pid}/wchan").read_text() else 0
        time.sleep(0.01)
