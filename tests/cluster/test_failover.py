"""Brokers leaving a running cluster: SIGTERM (unregisters) and SIGKILL (its connection
to the NameServer drops); an official producer keeps sending through the survivors."""

from __future__ import annotations

import time
from typing import Any

from broker_core.client import RocketMQClient
from broker_core.cluster.local import start_namesrv
from broker_core.errors import TopicNotFoundError
from broker_core.namesrv.client import NameServerClient
from tests.cluster.conftest import NAMESRV_ARGS, start_cluster
from tests.cluster.test_cluster import create_everywhere, held, route_brokers, wait_for
from tests.send_loop import OfficialProducer, SendLoop


class SteadyProducer(SendLoop[str]):
    """Sends one message at a time through ``endpoint`` with the official Producer until the
    ``with`` block ends; ``errors`` lists the sends that failed."""

    def __init__(self, endpoint: str, topic: str) -> None:
        super().__init__(lambda: OfficialProducer(endpoint, topic), topic, b"s")

    def __enter__(self) -> SteadyProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(30)

    def wait_sent(self, more: int, timeout_s: float = 20) -> None:
        target = len(self.acked) + more
        wait_for(lambda: len(self.acked) >= target, timeout_s, f"{more} more sends")


def route_of(ns: NameServerClient, topic: str) -> set[str]:
    try:
        return {q.broker_name for q in ns.get_route(topic).queue_datas}
    except TopicNotFoundError:
        return set()


def test_stopped_and_killed_brokers_leave_routes_and_sends_go_on(tmp_path) -> None:
    cluster = start_cluster(tmp_path, 3)
    ns = NameServerClient(cluster.namesrv)
    try:
        create_everywhere(cluster, "steady")
        entry = cluster.endpoints["broker-a"]
        with SteadyProducer(entry, "steady") as producer:
            producer.wait_sent(60)
            before = held(cluster, "steady")
            assert all(before[name] > 0 for name in cluster.brokers), before

            started = time.monotonic()
            assert cluster.brokers["broker-c"].stop() == 0  # SIGTERM: unregisters first
            wait_for(
                lambda: route_of(ns, "steady") == {"broker-a", "broker-b"},
                5,
                "broker-c to leave the NameServer's route",
            )
            wait_for(
                lambda: set(route_brokers(entry, "steady")) == {"broker-a", "broker-b"},
                5,
                "broker-c to leave broker-a's QueryRoute",
            )
            stopped_s = time.monotonic() - started
            producer.wait_sent(60)

            started = time.monotonic()
            cluster.brokers["broker-b"].kill()  # SIGKILL: only its connection tells
            wait_for(
                lambda: route_of(ns, "steady") == {"broker-a"},
                5,
                "broker-b to leave the NameServer's route",
            )
            killed_s = time.monotonic() - started
            a_before = held_one(cluster, "broker-a")
            producer.wait_sent(60)
        assert producer.errors == [], producer.errors[:3]
        assert held_one(cluster, "broker-a") >= a_before + 60  # the survivor took the sends
        assert stopped_s < 5 and killed_s < 5
    finally:
        ns.close()
        cluster.stop()


def held_one(cluster: Any, name: str) -> int:
    with RocketMQClient(cluster.endpoints[name]) as client:
        return sum(r["max_offset"] - r["min_offset"] for r in client.topic_status("steady"))


def test_brokers_serve_their_own_share_while_the_namesrv_is_down(tmp_path) -> None:
    cluster = start_cluster(tmp_path, 2)
    try:
        create_everywhere(cluster, "alone")
        entry = cluster.endpoints["broker-a"]
        assert cluster.namesrv_process is not None
        cluster.namesrv_process.terminate()
        assert cluster.namesrv_process.wait(15) == 0
        wait_for(
            lambda: set(route_brokers(entry, "alone")) == {"broker-a"},
            5,
            "broker-a to answer with its own share",
        )
        with RocketMQClient(entry) as client:
            client.send("alone", b"still here")
        cluster.namesrv_process = start_namesrv(
            cluster.namesrv, tmp_path / "namesrv-2.log", NAMESRV_ARGS
        )
        wait_for(
            lambda: set(route_brokers(entry, "alone")) == {"broker-a", "broker-b"},
            10,
            "the restarted NameServer to know both groups again",
        )
    finally:
        cluster.stop()
