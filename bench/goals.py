"""Issue 27's speed goals as a table, drawn from a run's results (``docs.markdown``).

Each row names a workload, its goal, ours, the peer's figure, the ratio and whether the
goal is met, all read from the workloads' JSON (``details``), and from
``bench.send_cost``'s output for our CPU per call. A figure the run did not measure shows
as "not measured" and its goal as unknown, never a guess:

    row                               read from
    --------------------------------  -----------------------------------------------
    16 senders, Java 4.x, 128 B       java-load  ours_/rocketmq_4x_128b_msg_s   ≥ 0.5×
    16 senders, Java 5.x gRPC         java-load  ours_/rocketmq_5x_128b_msg_s   ≥ 0.5×
    16 senders, official Python       python-load ours_/rocketmq_official_msg_s ≥ 1.0×
    latency at 5k, Java load          java-latency ours_/rocketmq_p99_at_5000_ms
                                      (p99 ≤ 5 ms and ≤ 2× RocketMQ's)
    CPU per call                      send_cost official_send_1, remoting_send_1,
                                      store_put_1 (≤ 20 / 20 / 5 µs)
    spark-read, spark-write           spark-* ours, details.kafka_rows_s        ≥ 1.0×
    batch produce, consume            java-batch ours_/rocketmq_batch_msg_s,
                                      ours_/rocketmq_drain_msg_s                ≥ 1.0×
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOT_MEASURED = "not measured"
CPU_GOALS_US = {"official_send_1": 20.0, "remoting_send_1": 20.0, "store_put_1": 5.0}


@dataclass(frozen=True)
class Goal:
    """One row: ``ours``/``peer`` None when not measured; ``met`` None when unknown."""

    workload: str
    goal: str
    ours: str
    peer: str
    ratio: str
    met: bool | None

    def line(self) -> str:
        met = NOT_MEASURED if self.met is None else ("**yes**" if self.met else "no")
        cells = (self.workload, self.goal, self.ours, self.peer, self.ratio, met)
        return "| " + " | ".join(cells) + " |"


def _fig(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"


def _details(results: Mapping[str, dict[str, Any]], workload: str) -> dict[str, Any]:
    result = results.get(workload, {})
    return {} if "error" in result else dict(result.get("details", {}))


def _ratio_row(
    what: str, goal: float, peer_name: str, ours: float | None, theirs: float | None, unit: str
) -> Goal:
    text = f"≥ {goal:g}× {peer_name}"
    if not ours or not theirs:
        return Goal(what, text, NOT_MEASURED, NOT_MEASURED, "", None)
    ratio = ours / theirs
    return Goal(what, text, _fig(ours, unit), _fig(theirs, unit), f"{ratio:.3f}", ratio >= goal)


def _pair(details: dict[str, Any], key: str) -> tuple[float | None, float | None]:
    """``(ours_<key>, rocketmq_<key>)`` from a result's details."""
    return details.get(f"ours_{key}"), details.get(f"rocketmq_{key}")


def _latency_row(details: dict[str, Any]) -> Goal:
    rate = details.get("goal_rate", 5000)
    what = f"send→receive latency, single 128 B, Java load at {rate:,} msg/s"
    goal = "p99 ≤ 5 ms and ≤ 2× RocketMQ's p99"
    ours, peer = _pair(details, f"p99_at_{rate}_ms")
    if ours is None or not peer:
        return Goal(what, goal, NOT_MEASURED, NOT_MEASURED, "", None)
    ratio = ours / peer
    sent = details.get(f"ours_at_{rate}_sent_msg_s", 0)
    reached = "" if sent >= 0.95 * rate else f" (ours sent {sent:,} msg/s)"
    met = ours <= 5.0 and ratio <= 2.0 and not reached
    return Goal(what, goal, f"p99 {ours:g} ms{reached}", f"p99 {peer:g} ms", f"{ratio:.3f}", met)


def _cpu_row(send_cost: Mapping[str, Any] | None) -> Goal:
    what = "our CPU per call, in-process: official SendMessage / remoting send / single put"
    goal = "≤ 20 / 20 / 5 µs"
    costs = dict((send_cost or {}).get("broker_core", send_cost or {}))
    found = [costs.get(name) for name in CPU_GOALS_US]
    if all(value is None for value in found):
        return Goal(what, goal, NOT_MEASURED, "", "", None)
    shown = " / ".join(NOT_MEASURED if v is None else f"{v:g}" for v in found) + " µs"
    known = [(v, CPU_GOALS_US[n]) for n, v in zip(CPU_GOALS_US, found, strict=True)]
    met = None if None in found else all(v <= limit for v, limit in known if v is not None)
    return Goal(what, goal, shown, "", "", met)


def rows(
    results: Sequence[dict[str, Any]], send_cost: Mapping[str, Any] | None = None
) -> list[Goal]:
    """Every goal row of issue 27, in its order."""
    by_name = {r["workload"]: r for r in results}
    java, python = _details(by_name, "java-load"), _details(by_name, "python-load")
    batch = _details(by_name, "java-batch")
    found = [
        _ratio_row(
            "single sends, 16 senders, Java 4.x client, 128 B",
            0.5,
            "RocketMQ (remoting)",
            *_pair(java, "4x_128b_msg_s"),
            "msg/s",
        ),
        _ratio_row(
            "single sends, 16 senders, Java 5.x client over gRPC, 128 B",
            0.5,
            "RocketMQ proxy",
            *_pair(java, "5x_128b_msg_s"),
            "msg/s",
        ),
        _ratio_row(
            "single sends, 16 senders, official Python client, 128 B",
            1.0,
            "RocketMQ proxy",
            *_pair(python, "official_msg_s"),
            "msg/s",
        ),
        _latency_row(_details(by_name, "java-latency")),
        _cpu_row(send_cost),
    ]
    for workload in ("spark-read", "spark-write"):
        result = by_name.get(workload, {})
        theirs = _details(by_name, workload).get("kafka_rows_s")
        ours = result.get("ours") if "error" not in result else None
        what = f"{workload} (rows of 128 B)"
        found.append(_ratio_row(what, 1.0, "Spark's Kafka connector", ours, theirs, "rows/s"))
    for case, what in (("batch", "batch produce"), ("drain", "consume (drain)")):
        found.append(
            _ratio_row(
                f"{what}, Java 4.x client",
                1.0,
                "RocketMQ, same client",
                *_pair(batch, f"{case}_msg_s"),
                "msg/s",
            )
        )
    return found


def markdown(
    results: Sequence[dict[str, Any]], send_cost: Mapping[str, Any] | None = None
) -> list[str]:
    """The "Speed goals" section's lines."""
    return [
        "## Speed goals (issue 27)",
        "",
        "Ratios in one run on the same machine; `ratio` = ours / peer (for latency, ours' "
        "p99 / the peer's: lower is better). A figure this run did not measure says so.",
        "",
        "| workload | goal | ours | peer | ratio | met? |",
        "|---|---|---:|---:|---:|---|",
        *(goal.line() for goal in rows(results, send_cost)),
        "",
    ]
