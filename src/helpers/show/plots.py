"""The course's matplotlib figures: latency distributions, speedup bars, sweeps, loss curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from helpers.measure.measurement import Measurement

__all__ = [
    "plot_latency_distribution",
    "plot_speedups",
    "plot_sweep",
    "plot_stage_breakdown",
    "plot_timeline",
    "plot_grouped_bars",
    "plot_speed_accuracy",
]


def _plt() -> Any:
    import matplotlib.pyplot as plt

    return plt


def plot_latency_distribution(measurements: Sequence[Measurement]) -> Any:
    """Histogram of per-call latencies (ms), with p50 and p99 marked, one colour per measurement."""
    if not measurements:
        raise ValueError("nothing to plot")
    ax = _plt().subplots(figsize=(7, 3.5))[1]
    for i, m in enumerate(measurements):
        t = np.asarray(m.times_s) * 1e3
        ax.hist(t, bins=min(40, max(5, len(t) // 2)), alpha=0.55, color=f"C{i}", label=m.label)
        ax.axvline(m.median * 1e3, color=f"C{i}", ls="-", lw=1.5)
        ax.axvline(m.p99 * 1e3, color=f"C{i}", ls=":", lw=1.5)
    ax.set(xlabel="latency per call (ms); solid line p50, dotted p99", ylabel="calls")
    ax.legend(fontsize=8)
    return ax


def plot_speedups(
    labels: Sequence[str],
    measured: Sequence[float],
    reported: Sequence[float | None] | None = None,
    ax: Any = None,
    title: str = "",
) -> Any:
    """Bars of measured speedups (x), with the case study's reported factor beside each where known."""
    if not labels:
        raise ValueError("nothing to plot: give at least one label and speedup")
    if len(labels) != len(measured) or (reported is not None and len(reported) != len(labels)):
        raise ValueError("labels, measured and reported must have the same length")
    ax = ax or _plt().subplots(figsize=(7, 3.5))[1]
    idx = np.arange(len(labels))
    width = 0.4 if reported is not None else 0.6
    bars = ax.bar(
        idx - (width / 2 if reported is not None else 0), measured, width, label="measured here"
    )
    ax.bar_label(bars, fmt="%.2fx", fontsize=8)
    if reported is not None:
        rep = [r if r is not None else 0 for r in reported]
        rb = ax.bar(
            idx + width / 2, rep, width, label="reported (case study)", color="C1", alpha=0.7
        )
        ax.bar_label(rb, labels=[f"{r:.2f}x" if r else "" for r in rep], fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(idx, labels, rotation=15, ha="right")
    ax.set(ylabel="speedup (x)", title=title)
    ax.legend(fontsize=8)
    return ax


def plot_sweep(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    right: Mapping[str, Sequence[float]] | None = None,
    right_label: str = "",
    ax: Any = None,
    title: str = "",
) -> Any:
    """Line plot of series over ``x`` (batch sizes, log 2 axis), with optional right-axis series."""
    if len(x) == 0 or not series:
        raise ValueError("nothing to plot: give x values and at least one series")
    ax = ax or _plt().subplots(figsize=(7, 3.5))[1]
    for i, (name, ys) in enumerate(series.items()):
        if len(ys) != len(x):
            raise ValueError(f"series {name!r} has {len(ys)} points for {len(x)} x values")
        ax.plot(x, ys, "o-", color=f"C{i}", label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(x), [str(v) for v in x])
    lines, names = ax.get_legend_handles_labels()
    if right:
        ax2 = ax.twinx()
        for j, (name, ys) in enumerate(right.items(), start=len(series)):
            ax2.plot(x, ys, "s--", color=f"C{j}", label=name)
        ax2.set_ylabel(right_label)
        l2, n2 = ax2.get_legend_handles_labels()
        lines, names = lines + l2, names + n2
    ax.legend(lines, names, fontsize=8)
    return ax


def plot_stage_breakdown(stages: Mapping[str, float], title: str = "where the time goes") -> Any:
    """Horizontal stacked bar of seconds per pipeline stage, labelled with shares."""
    if not stages or sum(stages.values()) <= 0:
        raise ValueError("stages must hold positive times")
    ax = _plt().subplots(figsize=(7, 1.8))[1]
    total = sum(stages.values())
    left = 0.0
    for i, (name, sec) in enumerate(stages.items()):
        ax.barh([0], [sec * 1e3], left=left, color=f"C{i}", label=f"{name} ({sec / total:.0%})")
        left += sec * 1e3
    ax.set(yticks=[], xlabel="milliseconds per image batch", title=title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=len(stages))
    return ax


def plot_timeline(events: Sequence[Any], ax: Any = None, title: str = "") -> Any:
    """Gantt chart of pipeline stages from the first start: one row per lane, one colour per stage.

    ``events``: objects with ``lane``, ``stage``, ``start`` and ``end`` (seconds).
    """
    if not events:
        raise ValueError("nothing to plot: no events")
    if any(e.end < e.start for e in events):
        raise ValueError("an event ends before it starts")
    lanes = list(dict.fromkeys(e.lane for e in events))
    stages = list(dict.fromkeys(e.stage for e in events))
    ax = ax or _plt().subplots(figsize=(8, 0.6 + 0.45 * len(lanes)))[1]
    start = min(e.start for e in events)
    for e in events:
        ax.barh(
            lanes.index(e.lane),
            (e.end - e.start) * 1e3,
            left=(e.start - start) * 1e3,
            height=0.6,
            color=f"C{stages.index(e.stage)}",
            edgecolor="white",
            linewidth=0.5,
        )
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set(xlabel="time (ms)", title=title)
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=f"C{i}", label=s) for i, s in enumerate(stages)],
        fontsize=8,
        loc="lower right",
    )
    return ax


def plot_grouped_bars(
    groups: Mapping[str, Mapping[str, float]],
    *,
    ylabel: str,
    title: str = "",
) -> Any:
    """Grouped bars: one group per outer key (e.g. batch size), one bar per inner key (e.g. runtime);
    an inner key missing from a group leaves a gap."""
    if not groups or not any(groups.values()):
        raise ValueError("nothing to plot: give at least one group with one value")
    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    ax = _plt().subplots(figsize=(min(12, max(7, 0.3 * len(groups) * len(series) + 2)), 3.8))[1]
    idx = np.arange(len(groups))
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        vals = [g.get(name, np.nan) for g in groups.values()]
        bars = ax.bar(idx - 0.4 + width * (i + 0.5), vals, width, label=name, color=f"C{i}")
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    many = len(groups) > 5
    ax.set_xticks(idx, list(groups), rotation=30 if many else 0, ha="right" if many else "center")
    ax.set(ylabel=ylabel, title=title)
    ax.legend(fontsize=7, ncol=2)
    return ax


def plot_speed_accuracy(
    points: Sequence[Mapping[str, Any]],
    *,
    title: str = "",
) -> Any:
    """Scatter of throughput (log x) against held-out accuracy, one labelled point per variant
    (``label``, ``speed``, ``accuracy``): better variants sit right (faster) and high."""
    if not points:
        raise ValueError("nothing to plot: give at least one point")
    for p in points:
        missing = {"label", "speed", "accuracy"} - set(p)
        if missing:
            raise ValueError(f"point {p!r} lacks {sorted(missing)}")
    ax = _plt().subplots(figsize=(7, 4))[1]
    offsets = [(6, 5), (6, -12), (6, 16), (6, -23)]  # staggered: coinciding points stay readable
    for i, p in enumerate(points):
        ax.scatter([p["speed"]], [p["accuracy"]], s=60, color=f"C{i}", zorder=3, label=p["label"])
        ax.annotate(
            p["label"],
            (p["speed"], p["accuracy"]),
            textcoords="offset points",
            xytext=offsets[i % len(offsets)],
            fontsize=8,
            color=f"C{i}",
        )
    accs = [float(p["accuracy"]) for p in points]
    lo, hi = min(accs), max(accs)
    pad = max(0.05 - (hi - lo) / 2, 0.01)  # a window of 10 points or more: tiny gaps look tiny
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_xscale("log")
    ax.set(xlabel="throughput (images/s, log scale)", ylabel="held-out accuracy", title=title)
    ax.grid(alpha=0.3, which="both")
    return ax
