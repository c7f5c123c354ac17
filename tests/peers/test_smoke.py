"""Smoke of the peer path in the normal suite: the fetch (``./dev peers`` on first use),
the Java drivers and mqadmin against our broker, and one scenario against a real Apache
RocketMQ, so neither the fetch nor the start path rots. The full differential suite is
``./dev conformance`` (tests/conformance/, slow). Each broker is started once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.scenarios_admin import adm_cluster_list
from tests.conformance.scenarios_java import j4_sync, j5_send_simple
from tests.conformance.targets import Target, start_ours, start_peer

SENT = ["m-0", "m-1", "m-2"]


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    target = start_ours(tmp_path_factory.mktemp("ours"))
    yield target
    target.stop()


@pytest.fixture(scope="module")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    target = start_peer(tmp_path_factory.mktemp("rocketmq"))
    yield target
    target.stop()


def test_java5_send_and_simple_consumer_against_ours(ours: Target) -> None:
    seen = j5_send_simple(ours)
    assert seen == {"sent": SENT, "received": SENT, "attempts": [1], "error": None}


def test_java4_sync_send_and_push_consumer_against_ours(ours: Target) -> None:
    seen = j4_sync(ours)
    assert seen == {"statuses": ["SEND_OK"], "received": SENT, "error": None}


def test_mqadmin_cluster_list_against_ours(ours: Target) -> None:
    seen = adm_cluster_list(ours)
    assert seen["failed"] is None and seen["rows"] == 1
    assert seen["header"][:4] == ["#Cluster Name", "#Broker Name", "#BID", "#Addr"]


def test_java5_send_and_simple_consumer_against_rocketmq(rocketmq: Target) -> None:
    seen = j5_send_simple(rocketmq)
    assert seen == {"sent": SENT, "received": SENT, "attempts": [1], "error": None}
