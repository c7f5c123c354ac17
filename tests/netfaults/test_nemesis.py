"""A random nemesis under load (slow): partitions, isolations, degraded links and SIGKILLs,
one at a time, on a controller-mode group of three brokers (sync replication) and etcd,
each in its own namespace, for ``NETFAULTS_NEMESIS_S`` seconds (default 120, bounded by
the number of faults too). Load: our client (one attempt per body, failing over across
the brokers) and the official ``rocketmq`` Producer, both recorded in one history.

Each fault is held until the load has invoked ``HOLD_SENDS`` more sends (progress, not a
clock), then healed (a killed broker restarted); the group must be whole again — every
broker in sync — and acknowledging before the next fault. At the end the history checker
must find nothing acknowledged lost and nothing read that was never sent. Duplicates are
allowed only from the official client (its own retries resend a body whose answer a fault
took; our sends make one attempt) and only of sends in flight during a fault or its
recovery — 0 once idempotent sends land.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_core.client import RocketMQClient
from tests.ha.conftest import wait_until
from tests.history import INVOKED, History, Op, check
from tests.netfaults.cluster import ETCD, SYNC, NetGroup
from tests.netfaults.load import HistoryLoad, read_all
from tests.netfaults.net import Network

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(ETCD).exists(), reason="etcd is not installed"),
]
TOPIC = "NetFaultsNemesis"
SEED = 20_261_126
BROKERS = ("a", "b", "c")
NODES = ("etcd", *BROKERS)
MAX_FAULTS = 40
HOLD_SENDS = 100


@pytest.fixture
def group(network: Network, tmp_path: Path) -> Iterator[NetGroup]:
    grp = NetGroup(network, tmp_path, broker=SYNC)
    try:
        yield grp
    finally:
        grp.stop()


def faults(grp: NetGroup, rng: random.Random) -> tuple[str, Callable[[], None]]:
    """A random fault: its name and how to undo what ``heal`` does not (restart a kill)."""
    net, kind = grp.network, rng.choice(["partition", "isolate", "degrade", "kill", "kill-master"])
    if kind == "partition":
        a, b = rng.sample(NODES, 2)
        net.partition(a, b)
        return f"partition {a}/{b}", lambda: None
    if kind == "isolate":
        x = rng.choice(NODES)
        net.isolate(x)
        return f"isolate {x}", lambda: None
    if kind == "degrade":
        x = rng.choice(BROKERS)
        net.degrade(x, loss=0.1, delay_ms=30, jitter_ms=10)
        return f"degrade {x}", lambda: None
    x = grp.master() if kind == "kill-master" else rng.choice(BROKERS)
    grp.procs[x].kill()
    return f"SIGKILL {x}", lambda: grp.start_broker(x) and None


def _during(op: Op, windows: list[tuple[float, float]]) -> bool:
    """Whether a send was in flight during a fault or the recovery from it."""
    end = op.completed_at if op.outcome != INVOKED else float("inf")
    return any(op.invoked_at <= w_end and end >= w_start for w_start, w_end in windows)


def invoked_after(history: History, t: float) -> int:
    return sum(1 for op in list(history.ops) if op.invoked_at > t)


def test_random_nemesis_under_load(group: NetGroup, chaos_figures) -> None:
    for name in NODES:
        group.network.add(name)
    group.start_etcd(["etcd"])
    for name in BROKERS:
        group.start_broker(name)
    wait_until(lambda: group.in_sync() == set(BROKERS), 60, "every broker in sync")
    with RocketMQClient(group.procs[group.master()].endpoint) as admin:
        admin.create_topic(TOPIC, queues=4)
    for proc in group.procs.values():  # the official client may ask a slave for the route
        with RocketMQClient(proc.endpoint) as client:
            wait_until(lambda c=client: bool(c.query_route(TOPIC)), 30, "the topic everywhere")  # type: ignore[misc]
    history, rng = History(), random.Random(SEED)
    loads = [
        HistoryLoad(group.endpoints(), TOPIC, history, senders=2, prefix="ours").start(),
        HistoryLoad(group.endpoints(), TOPIC, history, senders=1, prefix="off", official=True),
    ]
    loads[1].start()
    end = time.monotonic() + float(os.environ.get("NETFAULTS_NEMESIS_S", "120"))
    done, windows = 0, []
    try:
        for load in loads:
            load.wait_acks_after(0, 20, 60, "sends flowing")
        while time.monotonic() < end and done < MAX_FAULTS:
            name, undo = faults(group, rng)
            history.fault(name)
            began = history.faults[-1][0]
            wait_until(
                lambda: invoked_after(history, history.faults[-1][0]) >= HOLD_SENDS,
                120,
                f"sends under {name}",
            )
            history.fault(f"heal {name}")
            group.network.heal()
            undo()
            wait_until(lambda: group.in_sync() == set(BROKERS), 120, f"whole again after {name}")
            for load in loads:
                load.wait_acks_after(history.faults[-1][0], 10, 120, f"acks after {name}")
            windows.append((began, time.monotonic()))
            done += 1
    finally:
        for load in loads:
            load.stop()
    read_all(group.procs[group.master()].endpoint, TOPIC, history)
    report = check(history)
    ops = {op.msg_id: op for op in history.ops}
    stray = [m for m in report.duplicates if not _during(ops[m], windows)]
    ours = [m for m in report.duplicates if not m.startswith("off")]
    chaos_figures(
        f"netfaults nemesis ({done} faults)",
        summary=f"{report.summary()}; duplicated {sorted(report.duplicates)}",
    )
    assert not ours, f"stored twice though sent once with one attempt: {ours}"
    assert not stray, f"duplicates of sends that met no fault: {stray}"
    report.assert_valid(max_duplicates=sum(n - 1 for n in report.duplicates.values()))
