"""The scenario table: ``@scenario(client, description)`` registers a function that runs
against one :class:`~tests.conformance.targets.Target` and returns an observation (JSON
data). Names are the functions' names; both brokers run the same function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peers.drivers import Run

Observation = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    client: str  # java5 | java4 | mqadmin | python | node | cpp
    description: str
    run: Callable[[Any], Observation]


SCENARIOS: list[Scenario] = []


def scenario(client: str, description: str) -> Callable[[Callable[[Any], Observation]], Any]:
    def register(fn: Callable[[Any], Observation]) -> Callable[[Any], Observation]:
        SCENARIOS.append(Scenario(fn.__name__, client, description, fn))
        return fn

    return register


def bodies(run: Run, event: str = "received") -> list[str]:
    """The bodies of ``event`` lines, sorted (delivery order is not promised)."""
    return sorted(str(e["body"]) for e in run.of(event))


def all_scenarios() -> list[Scenario]:
    from tests.conformance import (  # noqa: F401 -- registers
        scenarios_admin,
        scenarios_java,
        scenarios_other,
        scenarios_py,
    )

    return list(SCENARIOS)
