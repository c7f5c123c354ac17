"""PNG plots of benchmark results (matplotlib, Agg backend: no display needed).

Each function takes the result dicts of the workloads that ran (``Result.to_dict``) and
writes one PNG, or nothing when none of its workloads is present.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend is chosen first
from matplotlib import ticker

MET, MISSED, OURS, PEER = "#2e7d32", "#c62828", "#1565c0", "#90a4ae"
THROUGHPUT_UNITS = ("msg/s", "rows/s", "MB/s")
BASELINES = {"store-append": "os.write", "spark-read": "Parquet", "spark-write": "Parquet"}


def _grid(count: int) -> tuple[Any, list[Any]]:
    cols = min(4, count)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ratios(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Per workload: the judged figure (ratio, or ours for an absolute goal) vs its goal."""
    if not results:
        return None
    fig, axes = _grid(len(results))
    for ax, r in zip(axes, results, strict=True):
        value = r["ratio"] if r.get("goal_on", "ratio") == "ratio" else r["ours"]
        label = "ratio" if r.get("goal_on", "ratio") == "ratio" else f"ours ({r['unit']})"
        ax.bar([label], [value], color=MET if r["meets_goal"] else MISSED, width=0.5)
        ax.axhline(r["goal"], color="black", linestyle="--", linewidth=1)
        ax.set_ylim(0, max(value, r["goal"]) * 1.25)
        checks = "".join(f"\n{k}: {'yes' if ok else 'NO'}" for k, ok in r.get("checks", {}).items())
        ax.set_title(f"{r['workload']}\ngoal: {r.get('goal_text', r['goal'])}{checks}", fontsize=9)
        ax.annotate(f"{value:.3g}", (0, value), ha="center", va="bottom", fontsize=9)
    fig.suptitle("Each workload against its goal (dashed; green: met)", fontsize=11)
    return _save(fig, path)


def _figures(r: dict[str, Any]) -> dict[str, float]:
    figures = r.get("details", {}).get("figures")
    if figures:
        return {str(k): float(v) for k, v in figures.items()}
    baseline = r.get("baseline_name", "baseline")
    if baseline == "baseline":  # results that do not name their baseline
        baseline = BASELINES.get(r["workload"], baseline)
    return {"ours": r["ours"], baseline: r["baseline"]}


def throughput(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Per throughput workload: ours and each peer, in the workload's unit."""
    chosen = [r for r in results if r["unit"] in THROUGHPUT_UNITS]
    if not chosen:
        return None
    fig, axes = _grid(len(chosen))
    for ax, r in zip(axes, chosen, strict=True):
        figures = _figures(r)
        names = list(figures)
        colors = [OURS if n.startswith("ours") else PEER for n in names]
        ax.bar(names, list(figures.values()), color=colors)
        ax.set_title(f"{r['workload']} ({r['unit']})", fontsize=10)
        ax.tick_params(axis="x", labelsize=8, rotation=20)
        for i, v in enumerate(figures.values()):
            ax.annotate(f"{v:,.0f}", (i, v), ha="center", va="bottom", fontsize=8)
    fig.suptitle("Throughput: ours (blue) and the baselines, same run", fontsize=11)
    return _save(fig, path)


def _percentile_sets(results: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, dict]]]:
    panels = []
    for r in results:
        d = r.get("details", {})
        if r["workload"] == "latency" and "ours_ms" in d:
            panels.append(
                ("latency: send → receive", {"ours": d["ours_ms"], "Redis": d["redis_ms"]})
            )
        elif r["workload"] == "backlog" and "small_ms" in d:
            small, large = d.get("backlogs", ["small", "large"])
            panels.append(
                (
                    "backlog: random-offset pull",
                    {f"{small:,} msgs": d["small_ms"], f"{large:,} msgs": d["large_ms"]},
                )
            )
    return panels


def latency(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """p50/p99/p999 bars (log scale) of the latency and backlog workloads."""
    panels = _percentile_sets(results)
    if not panels:
        return None
    fig, axes = _grid(len(panels))
    names = ("p50", "p99", "p999")
    for ax, (title, sides) in zip(axes, panels, strict=True):
        width = 0.8 / len(sides)
        for i, (side, values) in enumerate(sides.items()):
            xs = [j + i * width for j in range(len(names))]
            ax.bar(
                xs, [values[n] for n in names], width, label=side, color=OURS if i == 0 else PEER
            )
        if title.startswith("latency"):
            ax.axhline(2.0, color="black", linestyle="--", linewidth=1, label="goal p99 2 ms")
        ax.set_xticks([j + width * (len(sides) - 1) / 2 for j in range(len(names))], names)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylabel("ms (log scale)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    return _save(fig, path)


def peers(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Per workload: ours / each real peer (``details.<peer>_ratio``), against parity."""
    from bench import real_peers

    bars = [
        (f"{r['workload']}\nvs {real_peers.LABELS[peer]}", ratio, r.get("higher_is_better", True))
        for r in results
        for peer, ratio in real_peers.ratios(r.get("details", {})).items()
    ]
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(bars)), 3.6))
    names, values = [b[0] for b in bars], [b[1] for b in bars]
    colors = [MET if (v >= 1) == higher else MISSED for _, v, higher in bars]
    ax.bar(names, values, color=colors, width=0.5)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_ylim(0, max([*values, 1.0]) * 1.25)
    ax.set_ylabel("ours / peer")
    ax.tick_params(axis="x", labelsize=8)
    for i, v in enumerate(values):
        ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize=9)
    ax.set_title("Ours / real peer, same run (dashed: parity)", fontsize=10)
    return _save(fig, path)


def latency_curve(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """java-latency's latency–throughput curve: p50/p99/p99.9 (log ms) against the rate
    received at 10/50/80/100 % of each broker's highest sustained rate."""
    curves = next((r["details"]["curve"] for r in results if r["workload"] == "java-latency"), None)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    styles = {"p50": ":", "p99": "-", "p999": "--"}
    for side, points in curves.items():
        color = OURS if side == "ours" else PEER
        name = "ours" if side == "ours" else "RocketMQ"
        xs = [p["msg_s"] for p in points]
        for pct, style in styles.items():
            ys = [max(p[pct], 1e-3) for p in points]
            ax.plot(xs, ys, style, marker="o", color=color, label=f"{name} {pct}")
    ax.axhline(5.0, color="black", linestyle="--", linewidth=1, label="goal p99 5 ms")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("msg/s received (10, 50, 80, 100 % of the sustained rate)")
    ax.set_ylabel("send → receive ms (log scale)")
    ax.set_title("Latency–throughput, Java 4.x load, 128 B", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def draw_all(results: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """All the plots into ``out``; returns the files written."""
    made = [
        ratios(results, out / "ratios.png"),
        throughput(results, out / "throughput.png"),
        latency(results, out / "latency.png"),
        peers(results, out / "peers.png"),
        latency_curve(results, out / "latency_curve.png"),
    ]
    return [p for p in made if p is not None]
