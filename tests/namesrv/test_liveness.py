"""Brokers leave the routes: expiry, heartbeats, a killed registering process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from broker_core.errors import TopicNotFoundError
from broker_core.namesrv.client import NameServerClient, TopicQueueConfig
from tests.cluster_procs import ROOT
from tests.namesrv.conftest import registration

REGISTER_AND_WAIT = """
import sys, time
from broker_core.namesrv.client import NameServerClient, TopicQueueConfig
from tests.namesrv.conftest import registration
ns = NameServerClient(sys.argv[1])
topics = {"t-killed": TopicQueueConfig(2, 2)}
print(ns.register_broker(registration("killed", addr="127.0.0.1:30911", topics=topics)), flush=True)
time.sleep(600)
"""


def wait_until(condition: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``condition`` until true; returns the seconds it took; fails at the deadline."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout_s, f"not true within {timeout_s} s"
        time.sleep(0.02)
    return time.monotonic() - start


def has_route(client: NameServerClient, topic: str) -> bool:
    try:
        client.get_route(topic)
    except TopicNotFoundError:
        return False
    return True


def test_a_silent_broker_expires_after_the_configured_expiry(fresh_namesrv):
    broker, reader = NameServerClient(fresh_namesrv[1]), NameServerClient(fresh_namesrv[1])
    try:
        topics = {"t-expiry": TopicQueueConfig(1, 1)}
        broker.register_broker(registration("silent", addr="127.0.0.1:31911", topics=topics))
        assert has_route(reader, "t-expiry")
        took_s = wait_until(lambda: not has_route(reader, "t-expiry"), timeout_s=10)
        assert took_s >= 0.9  # expiry 1 s (the registration asked for 120 s: capped)
        assert reader.get_cluster_info().brokers == {}
    finally:
        broker.close()
        reader.close()


def test_heartbeats_keep_a_broker_past_the_expiry(fresh_namesrv):
    broker, reader = NameServerClient(fresh_namesrv[1]), NameServerClient(fresh_namesrv[1])
    try:
        reg = registration(
            "beating", addr="127.0.0.1:32911", topics={"t-beat": TopicQueueConfig(1, 1)}
        )
        broker.register_broker(reg)
        end = time.monotonic() + 2.5  # 2.5 expiry periods
        while time.monotonic() < end:
            broker.broker_heartbeat(reg.cluster, reg.broker_name, reg.broker_id, reg.broker_addr)
            assert has_route(reader, "t-beat")
            time.sleep(0.2)
        wait_until(lambda: not has_route(reader, "t-beat"), timeout_s=10)
    finally:
        broker.close()
        reader.close()


def test_killing_a_registered_process_removes_it_at_once(namesrv, ns_client: NameServerClient):
    proc = subprocess.Popen(
        [sys.executable, "-c", REGISTER_AND_WAIT, namesrv[1]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "['']"
        assert has_route(ns_client, "t-killed")
        proc.kill()
        proc.wait(10)
        # expiry is 120 s on this NameServer: only the closed connection can explain this
        took_s = wait_until(lambda: not has_route(ns_client, "t-killed"), timeout_s=5)
        assert took_s < 5
        assert "killed" not in ns_client.get_cluster_info().brokers
    finally:
        proc.kill()
        proc.wait(10)


def test_closing_the_client_unregisters_nothing_else(namesrv):
    keep, leave = NameServerClient(namesrv[1]), NameServerClient(namesrv[1])
    try:
        keep.register_broker(
            registration("stay", addr="127.0.0.1:33911", topics={"t-stay": TopicQueueConfig(1, 1)})
        )
        leave.register_broker(
            registration("go", addr="127.0.0.1:34911", topics={"t-stay": TopicQueueConfig(1, 1)})
        )
        assert [d.broker_name for d in keep.get_route("t-stay").broker_datas] == ["go", "stay"]
        leave.close()
        wait_until(lambda: len(keep.get_route("t-stay").broker_datas) == 1, timeout_s=5)
        assert keep.get_route("t-stay").broker_datas[0].broker_name == "stay"
    finally:
        keep.close()
        leave.close()


@pytest.mark.parametrize("graceful", [True, False])
def test_unregister_removes_the_broker(namesrv, ns_client: NameServerClient, graceful: bool):
    reg = registration(
        f"unreg-{graceful}",
        addr="127.0.0.1:35911",
        topics={f"t-unreg-{graceful}": TopicQueueConfig(1, 1)},
    )
    ns_client.register_broker(reg)
    if graceful:
        ns_client.unregister_broker(reg.cluster, reg.broker_name, reg.broker_id, reg.broker_addr)
    else:  # the wrong id: nothing happens
        ns_client.unregister_broker(reg.cluster, reg.broker_name, 3, reg.broker_addr)
    assert has_route(ns_client, f"t-unreg-{graceful}") is not graceful
