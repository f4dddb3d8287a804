"""The capstone's speed-up ladder (chapter 10): rung arithmetic, waterfall, decision guide, ledger steps.

Chapter 10 builds one task, the case study's saliency task on the same images, rung by rung on its
page, and times every rung in one interleaved run. This module does the arithmetic around it:
:func:`ladder_rows` turns the times into each rung's factor over the previous *kept* rung (so the
factors multiply exactly to the direct end-to-end number), :func:`plot_ladder` draws the waterfall
beside the case study's factors, :func:`explain_gap` and :func:`ladder_guide` write the page's
sentences from the numbers. The older ledger view follows: each chapter's own factor, multiplied.

Each step of case study 1 is a speedup factor measured by one chapter and stored in the
ledger. :func:`journey_rows` lines them up beside the reported factors; missing steps are
reported as missing (and which chapter measures them), never invented. Every row carries the
device and the math precision its record names (``device=`` / ``precision=`` metadata), or
:data:`NOT_RECORDED` when the chapter that wrote it did not say: a factor is only meaningful
together with where and how it was measured.

The record names in :data:`TASK_STEPS` are the ones chapters 3-6 write.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.record.reported import RESNET101_ONEFLOW

__all__ = [
    "NOT_RECORDED",
    "Rung",
    "STEP_RUNGS",
    "ladder_rows",
    "end_to_end",
    "plot_ladder",
    "explain_gap",
    "ladder_guide",
    "Step",
    "TASK_STEPS",
    "index_records",
    "journey_rows",
]


NOT_RECORDED = "not recorded"  # a record without device / precision metadata


def _meta(record: Mapping[str, Any] | None, key: str) -> str:
    """``record[key]`` as text (``device`` or ``precision``), or :data:`NOT_RECORDED`."""
    value = record.get(key) if record is not None else None
    text = "" if value is None else str(value).strip()
    return text or NOT_RECORDED


@dataclass(frozen=True)
class Step:
    """One step of the journey: where its measured factor lives and what the case study reported."""

    key: str
    label: str
    chapter: str
    record: str
    reported: float | None


TASK_STEPS: tuple[Step, ...] = (
    Step(
        "static",
        "dynamic -> static (nn.Graph)",
        "03_dynamic_to_static",
        "oneflow_task_graph_speedup_batch1",
        RESNET101_ONEFLOW["static_graph"],
    ),
    Step(
        "pruning",
        "algorithmic pruning",
        "04_pruning",
        "oneflow_nngraph_pruning_speedup",
        RESNET101_ONEFLOW["pruning_total"],
    ),
    Step(
        "parallel",
        "batch + pipeline",
        "05_parallelism",
        "parallel_total",
        RESNET101_ONEFLOW["parallel_total"],
    ),
    Step(
        "compile",
        "compile optimisations",
        "06_compile_optimisations",
        "oneflow_compile_chain_total",
        RESNET101_ONEFLOW["compile_total"],
    ),
)


@dataclass(frozen=True)
class Rung:
    """One rung of the capstone's ladder: a ledger key, a label, the case study's factor for it.

    ``forward_only`` marks the deployment rungs (forward pass only, a different task from the
    saliency task): their factor is over the last task rung, and they never count in
    :func:`end_to_end`.
    """

    key: str
    label: str
    reported: float | None = None
    forward_only: bool = False


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def ladder_rows(
    rungs: Sequence[Rung],
    seconds_per_image: Mapping[str, float],
    kept: Mapping[str, bool] | None = None,
) -> list[dict[str, Any]]:
    """One row per rung: ms per image, factor over the previous kept rung, cumulative over the first.

    The first rung is the baseline (always kept). A rung with ``kept[key] is False`` was measured
    but not adopted (it did not pay here): its factor is shown, the next rung is measured against
    the rung before it, and it does not move the cumulative level. Because every factor divides
    two times of the same run, the kept task rungs' factors multiply exactly to
    :func:`end_to_end` (the times telescope).
    """
    if not rungs:
        raise ValueError("no rungs given")
    keys = [r.key for r in rungs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"rung keys must be unique, got {keys}")
    if rungs[0].forward_only:
        raise ValueError("the first rung is the naive task's baseline: it cannot be forward-only")
    missing = [k for k in keys if k not in seconds_per_image]
    if missing:
        raise ValueError(f"no time for rung(s) {missing}")
    kept = dict(kept or {})
    if kept.get(keys[0]) is False:
        raise ValueError("the baseline rung is always kept")
    base = _positive(keys[0], seconds_per_image[keys[0]])
    rows: list[dict[str, Any]] = []
    prev, cum_r = base, 1.0
    for i, r in enumerate(rungs):
        t = _positive(r.key, seconds_per_image[r.key])
        keep = bool(kept.get(r.key, True))
        factor = prev / t if i else 1.0
        if r.reported is not None and keep:
            cum_r *= r.reported
        rows.append(
            {
                "rung": r.label,
                "key": r.key,
                "ms_per_image": t * 1e3,
                "factor": factor,
                "kept": keep,
                "cumulative": base / (t if keep else prev),
                "reported": r.reported,
                "cumulative_reported": cum_r,
                "forward_only": r.forward_only,
            }
        )
        if keep:
            prev = t
    return rows


def end_to_end(rows: Sequence[Mapping[str, Any]]) -> float:
    """Naive time / the last kept task rung's time (forward-only rungs do not count)."""
    task = [r for r in rows if r["kept"] and not r["forward_only"]]
    if not task:
        raise ValueError("no kept task rung")
    return rows[0]["ms_per_image"] / task[-1]["ms_per_image"]


def plot_ladder(
    rows: Sequence[Mapping[str, Any]], ax: Any = None, title: str = "", direct: float | None = None
) -> Any:
    """The waterfall: each rung's factor over the previous kept rung, measured beside reported.

    Bars span from the previous level to the new one (log scale); a rung that was not kept is
    hatched and leaves the level where it was; forward-only rungs sit right of a dotted line.
    ``direct`` (the direct end-to-end factor) is drawn as a horizontal line.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    if not rows:
        raise ValueError("nothing to plot")
    ax = ax or plt.subplots(figsize=(10, 4.5))[1]
    x = np.arange(len(rows))
    level = level_r = 1.0
    for i, r in enumerate(rows):
        if i == 0:
            ax.bar(x[0], 1.0, width=0.4, color="grey", alpha=0.4)
            continue
        new = level * r["factor"]
        ax.bar(
            x[i] - 0.2,
            abs(new - level),
            bottom=min(level, new),
            width=0.38,
            color="C0" if not r["forward_only"] else "C2",
            alpha=0.85 if r["kept"] else 0.3,
            hatch=None if r["kept"] else "//",
            label="measured here" if i == 1 else None,
        )
        ax.text(
            x[i] - 0.2, max(level, new), f"{r['factor']:.2f}x", ha="center", va="bottom", fontsize=7
        )
        if r["reported"] is not None:
            new_r = level_r * r["reported"]
            ax.bar(
                x[i] + 0.2,
                new_r - level_r,
                bottom=level_r,
                width=0.38,
                color="C1",
                alpha=0.85,
                label="case study" if level_r == 1.0 else None,
            )
            ax.text(
                x[i] + 0.2,
                new_r,
                f"{r['reported']:.2f}x",
                ha="center",
                va="bottom",
                fontsize=7,
                color="C1",
            )
            level_r = new_r
        if r["kept"]:
            level = new
    first_fwd = next((i for i, r in enumerate(rows) if r["forward_only"]), None)
    if first_fwd is not None:
        ax.axvline(first_fwd - 0.5, color="k", ls=":", lw=1)
    if direct is not None:
        ax.axhline(direct, color="C0", ls="--", lw=1, label=f"direct end to end {direct:.1f}x")
    ax.set_yscale("log")
    ax.set_xticks(x, [r["rung"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over naive (x, log)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def explain_gap(
    rows: Sequence[Mapping[str, Any]],
    ledger_rows: Sequence[Mapping[str, Any]],
    steps: Sequence[Step] = TASK_STEPS,
) -> list[str]:
    """Sentences, generated from the numbers, on why the ledger's product differs from the ladder.

    ``rows`` are :func:`ladder_rows`; ``ledger_rows`` are :func:`journey_rows` of ``steps`` (the
    chapters' factors). Each chapter step is set beside the ladder rungs of :data:`STEP_RUNGS`.
    """
    direct = end_to_end(rows)
    task = [r for r in rows[1:] if not r["forward_only"]]
    product = math.prod(r["factor"] for r in task if r["kept"])
    lines = [
        f"The ladder's kept factors multiply to {product:.2f}x, the direct end-to-end number "
        f"{direct:.2f}x: each rung is timed against the one below it in the same run, so the "
        "times telescope."
    ]
    measured = [r for r in ledger_rows if r["measured"] is not None]
    if measured:
        ledger_product = math.prod(r["measured"] for r in measured)
        way = "above" if ledger_product > direct else "below"
        lines.append(
            f"The chapters' own factors multiply to {ledger_product:.2f}x, {way} the ladder's "
            f"{direct:.2f}x. Each chapter measured its step against its own baseline "
            f"({', '.join(sorted({r['device'] + ' ' + r['precision'] for r in measured}))}), "
            "not on top of the steps before it."
        )
    dropped = [r for r in task if not r["kept"]]
    if dropped:
        lines.append(
            "Measured but not kept here (no gain on top of the rungs below): "
            + ", ".join(f"{r['rung']} ({r['factor']:.2f}x)" for r in dropped)
            + "; a product of chapter factors counts such steps anyway."
        )
    by_key = {r["key"]: r for r in task}
    diffs = []
    for step, row in zip(steps, ledger_rows):
        group = [by_key[k] for k in STEP_RUNGS.get(step.key, ()) if k in by_key]
        if row["measured"] is None or not group:
            continue
        here = math.prod(r["factor"] for r in group if r["kept"])
        names = " + ".join(r["rung"] for r in group)
        diffs.append((abs(math.log(row["measured"] / here)), step, row, here, names))
        lines.append(
            f"{step.label}: chapter {step.chapter[:2]} measured {row['measured']:.2f}x "
            f"({row['device']}, {row['precision']}) on its own baseline; on the ladder, on top "
            f"of the rungs below, {names} gave {here:.2f}x."
        )
    if diffs:
        _, step, row, here, _ = max(diffs, key=lambda d: d[0])
        lines.append(
            f"The largest difference is {step.label} ({row['measured']:.2f}x in its chapter, "
            f"{here:.2f}x here): a factor depends on what it is measured on top of (framework, "
            "batch, task variant, the steps already taken), so only the ladder's factors multiply "
            "to the end-to-end number."
        )
    return lines


def ladder_guide(rows: Sequence[Mapping[str, Any]], device: str) -> list[str]:
    """Decision-guide lines from this machine's ladder: what paid most, what did not, deployment."""
    task = [r for r in rows[1:] if not r["forward_only"]]
    if not task:
        raise ValueError("no rungs above the baseline")
    ranked = sorted(task, key=lambda r: -r["factor"])
    lines = [
        f"on {device}, the steps that paid most, in order: "
        + ", ".join(f"{r['rung']} {r['factor']:.2f}x" for r in ranked if r["kept"])
    ]
    flat = [r for r in task if not r["kept"] or r["factor"] < 1.05]
    if flat:
        lines.append(
            "hardly worth it here (under 5% or not kept): "
            + ", ".join(f"{r['rung']} {r['factor']:.2f}x" for r in flat)
        )
    lines.append(f"the saliency task end to end: {end_to_end(rows):.1f}x over the naive task")
    fwd = [r for r in rows if r["forward_only"]]
    if fwd:
        best = min(fwd, key=lambda r: r["ms_per_image"])
        lines.append(
            f"forward-only deployment: fastest was {best['rung']} at {best['ms_per_image']:.2f} ms "
            f"per image, {best['cumulative']:.1f}x the naive saliency task's time (it computes "
            "less: no backward pass, so no saliency map)"
        )
    return lines


# Which ladder rungs (Rung.key) make up each chapter step of TASK_STEPS (Step.key).
STEP_RUNGS: dict[str, tuple[str, ...]] = {
    "static": ("graph",),
    "pruning": ("pruning",),
    "parallel": ("batching", "pipelining"),
    "compile": ("precision", "compiler"),
}


def index_records(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """``{(chapter, name): record}`` for quick look-ups."""
    return {(r["chapter"], r["name"]): r for r in records}


def journey_rows(
    records: Iterable[Mapping[str, Any]],
    steps: Sequence[Step] = TASK_STEPS,
    remeasured: Mapping[str, float] | None = None,
    remeasured_meta: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per step: measured factor (ledger or ``remeasured[key]``), reported, cumulative.

    A step with neither a ledger record nor a re-measurement has ``measured=None`` and is skipped in
    the measured cumulative product (the row says which chapter to run). Each row names the
    ``device`` and ``precision`` of its measurement: the ledger record's metadata, or
    ``remeasured_meta`` (e.g. ``{"device": "cpu", "precision": "fp32"}``) for a re-measured step;
    :data:`NOT_RECORDED` where neither says.
    """
    if not steps:
        raise ValueError("no steps given")
    idx = index_records(records)
    remeasured = dict(remeasured or {})
    rows, cum_m, cum_r = [], 1.0, 1.0
    for s in steps:
        rec = idx.get((s.chapter, s.record))
        value = float(rec["value"]) if rec is not None else remeasured.get(s.key)
        source = (
            "ledger"
            if rec is not None
            else ("re-measured here" if s.key in remeasured else f"missing: run {s.chapter}")
        )
        meta = rec if rec is not None else (remeasured_meta if s.key in remeasured else None)
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"step {s.key!r} has a non-positive or non-finite factor {value!r}"
                )
            cum_m *= value
        if s.reported is not None:
            cum_r *= s.reported
        rows.append(
            {
                "step": s.label,
                "device": _meta(meta, "device"),
                "precision": _meta(meta, "precision"),
                "measured": value,
                "reported": s.reported,
                "cumulative_measured": cum_m,
                "cumulative_reported": cum_r,
                "source": source,
            }
        )
    return rows
