"""The differential runner: each scenario against Apache RocketMQ and against ours.

Both brokers are started once (side by side, in threads); each scenario then runs against
both at the same time, with the same client and inputs, and its two observations are
compared. A difference is *documented* when ``differences.json`` names the scenario (with
its reason), else *undocumented*. :func:`summary_line` prints
``N scenarios, S same, D differ (documented), U differ (undocumented)``.
"""

from __future__ import annotations

import json
import tempfile
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.conformance.registry import Scenario, all_scenarios
from tests.conformance.targets import Target, start_ours, start_peer

DIFFERENCES = Path(__file__).with_name("differences.json")


@dataclass
class Result:
    name: str
    client: str
    description: str
    rocketmq: Any
    ours: Any
    verdict: str  # same | documented | undocumented
    reason: str = ""


def documented() -> dict[str, str]:
    """Scenario name -> why ours deliberately (or knowingly) differs."""
    return {k: v["reason"] for k, v in json.loads(DIFFERENCES.read_text()).items()}


def _observe(scenario: Scenario, target: Target) -> Any:
    try:
        return scenario.run(target)
    except Exception as exc:  # a scenario's own failure is an observation too
        traceback.print_exc()
        return {"scenario_failed": f"{type(exc).__name__}: {str(exc)[:300]}"}


def run_all(
    workdir: Path,
    names: list[str] | None = None,
    log: Callable[[str], None] = print,
    parallel: int = 2,
) -> list[Result]:
    """Start both brokers, run the chosen scenarios (``parallel`` at a time against each;
    every scenario has its own topics and groups), stop both; results in table order."""
    chosen = [s for s in all_scenarios() if not names or s.name in names]
    reasons = documented()
    with ThreadPoolExecutor(2) as starter:
        peer_f = starter.submit(start_peer, workdir / "rocketmq")
        ours_f = starter.submit(start_ours, workdir / "ours")
        try:
            peer, ours = peer_f.result(), ours_f.result()
        except BaseException:
            for f in (peer_f, ours_f):
                if f.exception() is None:
                    f.result().stop()
            raise
    on_peer, on_ours = ThreadPoolExecutor(parallel), ThreadPoolExecutor(parallel)
    try:
        pairs = [
            (s, on_peer.submit(_observe, s, peer), on_ours.submit(_observe, s, ours))
            for s in chosen
        ]
        results = []
        for s, a, b in pairs:
            results.append(_judge(s, a.result(), b.result(), reasons))
            r = results[-1]
            log(f"{r.verdict:12} {s.name}")
            if r.verdict != "same":
                log(f"  rocketmq: {r.rocketmq}\n  ours:     {r.ours}")
        return results
    finally:
        # an interrupted run (SIGTERM, Ctrl-C) runs no more scenarios
        on_peer.shutdown(cancel_futures=True)
        on_ours.shutdown(cancel_futures=True)
        peer.stop()
        ours.stop()


def _judge(s: Scenario, rocketmq: Any, ours: Any, reasons: dict[str, str]) -> Result:
    # JSON round trip: tuples and lists compare alike
    same = json.loads(json.dumps(rocketmq)) == json.loads(json.dumps(ours))
    failed = isinstance(rocketmq, dict) and "scenario_failed" in rocketmq
    if same and not failed:
        verdict = "same"
    else:
        verdict = "documented" if s.name in reasons else "undocumented"
    return Result(s.name, s.client, s.description, rocketmq, ours, verdict, reasons.get(s.name, ""))


def counts(results: list[Result]) -> dict[str, int]:
    return {
        "scenarios": len(results),
        "same": sum(r.verdict == "same" for r in results),
        "documented": sum(r.verdict == "documented" for r in results),
        "undocumented": sum(r.verdict == "undocumented" for r in results),
    }


def summary_line(results: list[Result]) -> str:
    c = counts(results)
    return (
        f"{c['scenarios']} scenarios, {c['same']} same, {c['documented']} differ (documented), "
        f"{c['undocumented']} differ (undocumented)"
    )


def save(results: list[Result], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in results], indent=1))


def fresh_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="conformance-"))
