"""Sends racing a broker's graceful shutdown (SIGTERM; also how a controller-mode broker
restarts into a new role) fail only with errors a client can retry.

Found by the lossy-slave scenario: gRPC cancels the calls a stopping server does not take
any more (status CANCELLED), and our client made that a plain, non-retriable
``RocketMQError`` — so an application (or the client's own retry) gave up on a send that
only needed another broker or another try. Its outcome is unknown, as with a reset.
"""

from __future__ import annotations

import threading
from pathlib import Path

from broker_core.client import RocketMQClient
from tests.send_loop import LoopThreads, restart_explains
from tests.server.conftest import start_broker

SENDERS = 8


def test_sends_racing_a_graceful_stop_fail_retriably(tmp_path: Path) -> None:
    broker = start_broker(tmp_path)
    with RocketMQClient(broker.endpoint) as admin:
        admin.create_topic("stop-race", queues=4)
    failures: list[Exception] = []
    acked = threading.Semaphore(0)

    def send_until_stopped() -> None:
        with RocketMQClient(broker.endpoint, max_attempts=1, timeout_s=5) as client:
            while not loops.stop.is_set():
                try:
                    client.send("stop-race", b"x" * 100)
                    acked.release()
                except Exception as exc:
                    failures.append(exc)
                    if broker.process.poll() is not None:
                        return

    loops = LoopThreads((f"s{i}", send_until_stopped) for i in range(SENDERS))
    loops.start()
    for _ in range(200):  # sends in flight on every thread
        assert acked.acquire(timeout=30)
    assert broker.stop() == 0
    loops.join(60)
    assert failures, "no send raced the shutdown"
    unexplained = {repr(f)[:160] for f in failures if not restart_explains(f)}
    assert not unexplained, unexplained
