"""The real systems a workload runs beside ours in the same run (issue 24): which exist,
which workload has a side for which, and how a result names their figures.

``bench/peers.py`` starts the Debian servers used as baselines (Redis, NATS); this module is
about the peers fetched by Maven and started by the top-level ``peers`` package
(``peers/kafka.py``, and ``peers/rocketmq.py`` once it lands). A workload with peer sides
takes ``peers=(...)``; ``python -m bench WORKLOAD --peer NAME`` chooses them (default: every
peer the workload has), ``--peer none`` runs ours and the baselines only.

A result carries each peer's figures in ``details`` under the peer's prefix:
``<peer>_<figure>`` (e.g. ``kafka_rows_s``), ``<peer>_ratio`` = ours / peer in the
workload's unit, ``<peer>_version``. ``docs.py`` draws the peer table and plot from them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

NAMES = ("kafka", "rocketmq")
LABELS = {"kafka": "Kafka", "rocketmq": "RocketMQ"}
# workload -> the peers it has a side for; new sides are added here and in the workload
WORKLOAD_PEERS: dict[str, tuple[str, ...]] = {
    "spark-read": ("kafka",),
    "spark-write": ("kafka",),
    "java-load": ("rocketmq",),
    "java-batch": ("rocketmq",),
    "java-latency": ("rocketmq",),
    "python-load": ("rocketmq",),
}
# workloads that are only a comparison with a peer: `all --peer none` skips them
PEER_ONLY = frozenset({"java-load", "java-batch", "java-latency", "python-load"})


class PeerChoiceError(ValueError):
    """A ``--peer`` the bench cannot run: unknown, not yet available, or not in a workload."""


def available(name: str) -> bool:
    """Whether ``peers/<name>.py`` exists (the module that fetches and starts the peer)."""
    return importlib.util.find_spec(f"peers.{name}") is not None


def choose(workload: str, asked: Sequence[str]) -> tuple[str, ...]:
    """The peers to run for ``workload``: ``asked`` checked, or every peer it has.

    >>> choose("spark-read", [])
    ('kafka',)
    >>> choose("spark-read", ["none"])
    ()
    >>> choose("produce", ["kafka"])
    Traceback (most recent call last):
    ...
    bench.real_peers.PeerChoiceError: produce has no kafka side (it has none)
    """
    has = WORKLOAD_PEERS.get(workload, ())
    if not asked:
        return has
    if list(asked) == ["none"]:
        return ()
    for name in asked:
        if name not in NAMES:
            raise PeerChoiceError(f"unknown peer {name!r}; known: {', '.join(NAMES)}, none")
        if not available(name):
            raise PeerChoiceError(
                f"the {name} peer is not yet available: peers/{name}.py, which fetches and "
                "starts it (issue 24), is not in this checkout"
            )
        if name not in has:
            raise PeerChoiceError(
                f"{workload} has no {name} side (it has {', '.join(has) or 'none'})"
            )
    return tuple(dict.fromkeys(asked))


def ratios(details: dict[str, object]) -> dict[str, float]:
    """``{peer: ours / peer}`` for each peer whose ratio a result's details carry.

    >>> ratios({"kafka_ratio": 0.5, "rows": 3})
    {'kafka': 0.5}
    """
    found = {}
    for name in NAMES:
        value = details.get(f"{name}_ratio")
        if isinstance(value, int | float):
            found[name] = float(value)
    return found
