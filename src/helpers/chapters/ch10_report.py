"""Chapter 10's report: the waterfall, tables and generated sentences its hidden cells show,
from the :class:`~helpers.measure.ladder.Ladder` the page climbed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from helpers.chapters.ch10_ladder import TASK_STEPS
from helpers.core.comparison import Comparison
from helpers.measure.ladder import Ladder, chain
from helpers.measure.measurement import paired_ratio
from helpers.record.reported import RESNET101_ONEFLOW
from helpers.show.table import Table

__all__ = [
    "checks_table",
    "plot_ladder",
    "ladder_sentences",
    "explain_gap",
    "ladder_guide",
    "machines_table",
]

# Candidate names that are static graphs (a traced, compiled program), for static_graph_line.
STATIC_GRAPHS = ("torch.compile", "nn.Graph")
# The pipelining rung's two controls, as the page names them.
REPLICAS, TWIN = "replicas: 2 workers, no lock", "A/A: pipelining again"


# ---- what each path's check found ----


def _brief(check: Any) -> str:
    """One cell of the checks table: how much of the float32 bound, or the task-level result."""
    if isinstance(check, Comparison):
        return f"{check.used:.2g} of the fp32 bound"
    return f"task level ({check.mode}): {check.brief()}"


def checks_table(
    lad: Ladder,
    checks: Mapping[str, Sequence[Any]],
    results: Mapping[str, tuple[Any, Any]],
    ref_maps: Any,
    bound: Any,
    notes: Sequence[str] = (),
) -> Table:
    """Every path's answer against the naive task's: what its checks (path -> [logits check, maps
    check]) found, or why it failed, and how many of its maps (``results``: path -> (maps,
    logits)) lie beyond float32's ``bound`` of ``ref_maps`` (OneFlow's: checked against its own
    eager task's instead)."""
    import torch

    moved = {
        k: int((~torch.isclose(maps, ref_maps, bound.rtol, bound.atol)).flatten(1).any(1).sum())
        for k, (maps, _) in results.items()
        if maps is not None and lad.paths[k].get("graph") != "oneflow"
    }
    fails = {k: [f"FAILS: {why}"] for k, why in lad.failed.items()}  # never kept
    rows = [
        {
            "path": k,
            "logits": _brief(v[0]) if k in checks else v[0],
            "maps": _brief(v[1]) if len(v) > 1 else "-",
            "maps beyond fp32": moved.get(k, "-"),
        }
        for k, v in ({**checks, **fails}).items()
    ]
    title = f"Every path's answer against the naive task's ({len(ref_maps)} images)"
    return Table(rows, title=title, notes=[f"maps' float32 bound: {bound}", *notes])


# ---- the waterfall ----


def plot_ladder(lad: Ladder, ax: Any = None, title: str = "") -> Any:
    """The waterfall: each rung's bar from the level of the path it is measured over to its own
    (log scale), beside the case study's, and the measured end-to-end factor in its band."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = lad.rows
    ax = ax or plt.subplots(figsize=(10, 4.5))[1]
    x = np.arange(len(rows))
    level = {lad.naive: 1.0}
    for r in rows[1:]:
        if r["kept"]:
            level[r["candidate"]] = level[r["base"]] * r["factor"]
    level_r = 1.0
    ax.bar(x[0], 1.0, width=0.4, color="grey", alpha=0.4)
    bar, text = partial(ax.bar, width=0.38), partial(ax.text, ha="center", fontsize=7)
    for i, r in enumerate(rows[1:], start=1):
        label = "measured here, kept" if r["kept"] else "measured here, not kept"
        start, color = level[r["base"]], "C2" if r["forward_only"] else "C0"
        new = start * r["factor"]
        look = {"alpha": 0.85, "hatch": None} if r["kept"] else {"alpha": 0.3, "hatch": "//"}
        bar(x[i] - 0.2, abs(new - start), bottom=min(start, new), color=color, label=label, **look)
        text(x[i] - 0.2, max(start, new) * 1.05, f"{r['factor']:.2f}x")
        if r["reported"] is not None:
            new_r, label = level_r * r["reported"], "case study"
            bar(x[i] + 0.2, new_r - level_r, bottom=level_r, color="C1", alpha=0.85, label=label)
            text(x[i] + 0.2, new_r * 1.05, f"{r['reported']:.2f}x", color="C1")
            level_r = new_r
    first_fwd = next((i for i, r in enumerate(rows) if r["forward_only"]), None)
    if first_fwd is not None:
        ax.axvline(first_fwd - 0.5, color="k", ls=":", lw=1)
    direct = lad.end_to_end
    if direct is not None:
        ax.axhspan(direct.p25, direct.p75, color="C0", alpha=0.12)
        ax.axhline(direct.median, color="C0", ls="--", lw=1, label=f"end to end {direct}")
    ax.set_yscale("log")
    ax.set_xticks(x, [r["rung"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over naive (x, log)")
    ax.set_title(title)
    legend = dict(zip(*reversed(ax.get_legend_handles_labels())))  # each label once
    ax.legend(legend.values(), legend.keys(), fontsize=8)
    return ax


# ---- the page's sentences, generated from the numbers ----


def _task(lad: Ladder) -> list[dict[str, Any]]:
    return [r for r in lad.rows[1:] if not r["forward_only"]]


def headline(lad: Ladder, where: str, quick: str | None = None) -> str:
    """The end-to-end sentence (naive and final path timed together): factor, interval, ``where``
    (device, precision, threads), and in quick mode what the ``quick`` sizes are, in the same
    sentence, so the figure is never read beside the case study's without it."""
    caveat = f", a quick-mode figure ({quick})" if quick else ""
    if lad.end_to_end is None:
        return f"End to end on {where}{caveat}: no rung paid, the naive task is the final one."
    e2e = lad.end_to_end
    naive, last = (1e3 / lad.final_stage[k].throughput for k in (lad.naive, lad.final))
    return (
        f"End to end on {where}{caveat}, the saliency task runs **{e2e.median:.1f}x** faster than "
        f"the naive task (naive and final path timed together: {e2e.spread} over {e2e.rounds} "
        f"rounds; {naive:.2f} -> {last:.2f} ms per image)."
    )


def _is_static(name: str) -> bool:
    return any(s in name for s in STATIC_GRAPHS)


def static_graph_line(lad: Ladder) -> str:
    """Whether the final path contains a static graph, and what each static-graph candidate gave."""
    final = lad.kept()
    static = [r for r in final if _is_static(r["candidate"])]
    tried = [
        f"{name} at the {r['rung']} rung, {ratio.verdict()}"
        for r in _task(lad)
        for name, ratio in r["candidates"].items()
        if _is_static(name)
    ]
    if static:
        head = "The final path contains a static graph: " + ", ".join(
            f"{r['candidate']} (kept at the {r['rung']} rung)" for r in static
        )
    else:
        picks = ", ".join(f"{r['rung']}: {r['candidate']}" for r in final) or "none"
        head = f"The final path contains no static graph: every kept rung runs eagerly ({picks})"
    return head + (". Static graphs measured: " + "; ".join(tried) + "." if tried else ".")


def article_line(reported: Mapping[str, float] = RESNET101_ONEFLOW) -> str:
    """The case study's step factors beside its article's cumulative figure, from ``reported``.

    The article's four step factors multiply to about 22.0x with the compile total the course uses
    (+64%, 1.64x); the article itself says "about 21x", which fits its other two wordings of the
    compile total ("1.56 倍", "约 1.6 倍"). Both are the article's figures; the sentence shows both.
    """
    r = reported
    steps = (r["static_graph"], r["pruning_total"], r["parallel_total"])
    product = math.prod(steps) * r["compile_total"]
    with_vs_best = math.prod(steps) * r["compile_total_vs_best"]
    return (
        f"The case study's step factors as the course uses them (static graph "
        f"{r['static_graph']}x, pruning {r['pruning_total']}x, parallelism "
        f"{r['parallel_total']}x, compile {r['compile_total']}x) multiply to {product:.1f}x, "
        "against its article's "
        f'"about {r["cumulative"]:.0f}x": the article writes its compile total as '
        f"+{round((r['compile_total'] - 1) * 100)}% ({r['compile_total']}x), as "
        f'"{r["compile_total_vs_best"]} 倍" and as "约 {r["compile_total_summary"]} 倍", '
        f"and its {r['cumulative']:.0f}x fits the last two ({with_vs_best:.1f}x with "
        f"{r['compile_total_vs_best']}x); the course uses {r['compile_total']}x. The article's "
        f"end-to-end figure, more than {r['end_to_end']:.0f}x, includes small steps it did not "
        "record."
    )


def explain_gap(lad: Ladder, ledger_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Sentences, generated from the numbers, on why the chapters' own factors (``ledger_rows``:
    :func:`~helpers.chapters.ch10_ladder.journey_rows`) multiply to another figure than the ladder."""
    e2e = lad.end_to_end or chain([])
    task = _task(lad)
    product = chain([r["ratio"] for r in lad.kept()]).median
    lines = [
        f"The ladder's kept factors multiply to {product:.2f}x; the end-to-end figure, naive and "
        f"final path timed together, is {e2e.median:.2f}x ({e2e.spread}): factors "
        "measured in separate runs multiply only approximately."
    ]
    measured = [r for r in ledger_rows if r["measured"] is not None]
    if measured:
        ledger_product = ledger_rows[-1]["cumulative_measured"]
        way = "above" if ledger_product > e2e.median else "below"
        lines.append(
            f"The chapters' own factors multiply to {ledger_product:.2f}x, {way} the ladder's "
            f"{e2e.median:.2f}x. Each chapter measured its step against its own baseline "
            f"({', '.join(sorted({r['device'] + ' ' + r['precision'] for r in measured}))}), "
            "not on top of the steps before it."
        )
    dropped = sum(not r["kept"] for r in task)
    if dropped:
        lines.append(
            f"{dropped} rung(s) measured here were not built on (the decision guide says why); "
            "a product of chapter factors counts such steps anyway."
        )
    by_key = {r["key"]: r for r in task}
    diffs = []
    for step, row in zip(TASK_STEPS, ledger_rows):
        group = [by_key[k] for k in step.rungs if k in by_key]
        if row["measured"] is None or not group:
            continue
        here = math.prod(r["factor"] for r in group if r["kept"])
        names = " + ".join(r["rung"] for r in group)
        diffs.append((abs(math.log(row["measured"] / here)), step, row, here))
        lines.append(
            f"{step.label}: chapter {step.chapter[:2]} measured {row['measured']:.2f}x "
            f"({row['device']}, {row['precision']}) on its own baseline; on the ladder, on top "
            f"of the rungs kept below, {names} gave {here:.2f}x."
        )
    if diffs:
        _, step, row, here = max(diffs, key=lambda d: d[0])
        lines.append(
            f"The largest difference is {step.label} ({row['measured']:.2f}x in its chapter, "
            f"{here:.2f}x here): a factor depends on what it is measured on top of (framework, "
            "batch, task variant, the steps already taken)."
        )
    return lines


def ladder_guide(lad: Ladder, device: str) -> list[str]:
    """Decision-guide lines from this machine's ladder: what paid, what did not and why, deployment."""
    if not _task(lad):
        raise ValueError("no rungs above the baseline")
    kept = sorted(lad.kept(), key=lambda r: -r["factor"])
    lines = [
        f"on {device}, the steps that paid, largest first: "
        + (", ".join(f"{r['candidate']} {r['ratio'].short}" for r in kept) or "none")
    ]
    lines += [  # a kept row with a reason: another candidate of its rung failed its check
        f"{r['rung']}: {r['candidate']} kept; {r['reason']}"
        if r["kept"]
        else f"not built on: {r['candidate']}: {r['reason']}"
        for r in lad.rows[1:]
        if not r["kept"] or r["reason"]
    ]
    lines.append(static_graph_line(lad))
    e2e = lad.end_to_end
    lines.append(
        f"the saliency task end to end: {e2e} over the naive task, on the path "
        + " -> ".join([lad.naive, *(r["candidate"] for r in lad.kept())])
        if e2e is not None
        else "the saliency task end to end: no rung paid"
    )
    fwd = [r for r in lad.rows if r["forward_only"] and r["candidate"] not in lad.failed]
    if fwd:
        best = min(fwd, key=lambda r: r["ms_per_image"])
        lines.append(
            f"forward-only deployment: fastest that passed its check was {best['candidate']} at "
            f"{best['ms_per_image']:.2f} ms per image (it computes less: no backward pass, so no "
            "saliency map)"
        )
    return lines


# ---- the run's conditions and the page's sentences ----


def ladder_sentences(
    lad: Ladder,
    where: str,
    quick: str | None,
    keep: Any,
    served: Mapping[str, float] | None = None,
    in_flight: int = 1,
) -> list[str]:
    """The page's findings under the ladder table: the headline, the article's figures, the
    pipelining rung's controls (``keep``: the page's keep rule), a contended run, the served rung
    (``served``: ``rps``, ``p99_ms``; ``in_flight`` requests). Static graphs and dropped rungs are
    the decision guide's (:func:`ladder_guide`)."""
    pipe = next(r for r in lad.rows if r["key"] == "pipelining")
    stage, base = pipe["stage"], pipe["base"]
    over = {k: paired_ratio(stage[base], stage[k]) for k in ("pipelining", REPLICAS)}
    lock = paired_ratio(stage[REPLICAS], stage["pipelining"])
    twin = paired_ratio(stage["pipelining"], stage[TWIN])
    gain = ": its gain is overlap." if keep(lock) else ": its gain is replicas, not overlap."
    lines = [
        headline(lad, where, quick),
        article_line(),  # the case study's factors beside its article's 21x
        f"Pipelining over {base}: {over['pipelining']}; two replicas without the lock: "
        f"{over[REPLICAS]}. The lock itself: {lock.verdict()}"
        + (gain if keep(over["pipelining"]) else "."),
        f"Control: the A/A twin of pipelining, {twin.verdict()}: "
        + ("kept, a false keep (the noise)." if keep(twin) else "not kept, as it must be."),
    ]
    if any(m.contended for stage in lad.stages for m in stage.values()):
        lines.append(
            "Other processes kept the cores busy during this run: compare its figures with "
            "other machines' only after a rerun on a quiet machine."
        )
    if served:
        lines.append(
            f"Served: {served['rps']:.0f} requests/s with {in_flight} in flight, "
            f"each decoded by its client; p99 latency {served['p99_ms']:.1f} ms."
        )
    return lines


def machines_table(
    lad: Ladder, device: Any, references: Mapping[str, Iterable[Mapping[str, Any]]]
) -> Table:
    """This machine's rung factors beside the committed reference runs' (``references``:
    :func:`helpers.record.ledger.reference_runs`), one row per run and rung."""
    here = [
        {"run": "this machine", "rung": r["key"], "device": str(device), "factor": r["factor"]}
        for r in lad.rows[1:]
    ]
    refs = [
        {
            "run": run,
            "rung": r["name"].removeprefix("ladder_").removesuffix("_factor"),
            "device": r.get("device") or "-",
            "factor": r["value"],
        }
        for run, recs in references.items()
        for r in recs
        if r["chapter"] == "10_capstone" and r["name"].startswith("ladder_")
    ]
    return Table(here + refs, title="Ladder factors by machine")
