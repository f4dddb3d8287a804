"""The capstone's speed-up ladder (chapter 10): test images, rung arithmetic, waterfall, sentences.

Chapter 10 builds one task, the course's model of case study 1's saliency service, rung by rung
on its page, and times every rung in one interleaved run. This module does what surrounds that:

- :func:`order_stable_images` picks the test images whose saliency map does not depend on the
  float32 summation order (the float32 claims of the page hold on them);
- :func:`serve_onnx`, the served rung's Triton server;
- the presentation of a :class:`~helpers.measure.ladder.Ladder` (the engine that climbs, each
  rung on the last kept one, lives in :mod:`helpers.measure.ladder`, for any model):
  :func:`ladder_table`, :func:`plot_ladder` (the waterfall beside the case study's factors), and
  the page's generated sentences: :func:`headline`, :func:`static_graph_line`,
  :func:`article_line`, :func:`explain_gap`, :func:`ladder_guide`.

The older ledger view follows: each chapter's own factor, multiplied (:func:`journey_rows`).
Each step of case study 1 is a speedup factor measured by one chapter and stored in the ledger;
missing steps are reported as missing (and which chapter measures them), never invented. Every
row carries the device and the math precision its record names (``device=`` / ``precision=``
metadata), or :data:`NOT_RECORDED` when the chapter that wrote it did not say.

The record names in :data:`TASK_STEPS` are the ones chapters 3-6 write
(:mod:`helpers.record.ledger_names` lists them; a test checks that they exist there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.measure.ladder import Ladder
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.record.ledger_names import JOURNEY
from helpers.record.reported import RESNET101_ONEFLOW

__all__ = [
    "order_stable_images",
    "answer",
    "serve_onnx",
    "served_reason",
    "order_sentence",
    "REPORTED",
    "ladder_table",
    "plot_ladder",
    "headline",
    "static_graph_line",
    "article_line",
    "dropped_lines",
    "explain_gap",
    "ladder_guide",
    "journey_rows",
]


NOT_RECORDED = "not recorded"  # a record without device / precision metadata
# Candidate names that are static graphs (a traced, compiled program), for static_graph_line.
STATIC_GRAPHS = ("torch.compile", "nn.Graph")


# ---- the test images ----


@dataclass(frozen=True)
class ImageChoice:
    """Which images of a pool the page tests on, and how many were left out and why."""

    keep: tuple[int, ...]  # indices into the pool, sorted
    pool: int  # images considered
    order_dependent: int  # images whose map moved with the summation order (left out)
    min_margin: float  # the smallest top-2 logit margin among the kept images

    def __str__(self) -> str:
        return (
            f"{len(self.keep)} of {self.pool} images kept (top-2 logit margin at least "
            f"{self.min_margin:.3f});\n{self.order_dependent} have a map that changes with the "
            "float32 summation order (left out)"
        )


def order_stable_images(
    task: Callable[[Any], Any],
    x: Any,
    n: int,
    *,
    batch: int,
    threads: int,
    network: str | None = None,
) -> ImageChoice:
    """The ``n`` images of ``x`` whose saliency map does not depend on the summation order.

    A saliency map is a gradient through ReLU and max-pooling, which choose a branch wherever
    their inputs tie (flat regions of a generated JPEG make near-ties): there a float32 summation
    order (batch size, thread count) can pick another, equally valid map. ``task`` (a saliency
    task returning ``.logits`` and ``.saliency``) runs on ``x`` in strict float32 one image per
    call, in batches of ``batch`` with ``threads`` threads, and in batches with one thread; an
    image is kept when its three maps agree within float32's bound at the maps' scale
    (:func:`helpers.core.precision.tolerance`, ``mode="fp32"``, ``network``). Of those, the ``n``
    with the widest top-2 logit margin are chosen. Raises when fewer than ``n`` are stable.
    """
    import torch

    from helpers.core import precision
    from helpers.core.threads import torch_threads

    total = len(x)
    if not 1 <= n <= total:
        raise ValueError(f"n must be in 1..{total}, got {n}")
    with precision.strict_fp32():
        single = [task(x[i : i + 1]) for i in range(total)]
        orders = [torch.cat([r.saliency for r in single])]
        for t in (threads, 1):
            with torch_threads(t):
                maps = [task(x[i : i + batch]).saliency for i in range(0, total, batch)]
            orders.append(torch.cat(maps))
        logits = torch.cat([r.logits for r in single])
    ref = orders[0]
    bound = precision.tolerance(
        "fp32", network=network, scale=precision.output_scale(ref, floor=0.0)
    )
    limit = bound.atol + bound.rtol * ref.abs()
    stable = torch.ones(total, dtype=torch.bool, device=ref.device)
    for other in orders[1:]:
        stable &= ((other - ref).abs() <= limit).flatten(1).all(1)
    top2 = logits.topk(2, dim=1).values
    margin = (top2[:, 0] - top2[:, 1]).detach().cpu()
    stable = stable.cpu()
    ranked = [i for i in margin.argsort(descending=True).tolist() if stable[i]]
    if len(ranked) < n:
        raise AssertionError(
            f"only {len(ranked)} of {total} images have an order-independent map; need {n} "
            "(generate a larger pool)"
        )
    keep = tuple(sorted(ranked[:n]))
    return ImageChoice(
        keep=keep,
        pool=total,
        order_dependent=int((~stable).sum()),
        min_margin=float(margin[list(keep)].min()),
    )


def answer(results: Iterable[Any]) -> tuple[Any, Any]:
    """All images' saliency maps and logits, in image order, as float32 CPU tensors.

    ``results`` are the task's answers (``.saliency``, ``.logits``: PyTorch or OneFlow tensors,
    NumPy arrays), one per call; a forward-only answer has ``saliency=None`` and gives ``None``
    for the maps.
    """
    import torch

    from helpers.core.arrays import to_numpy

    results = list(results)
    if not results:
        raise ValueError("no results")

    def cat(xs: Iterable[Any]) -> Any:
        return torch.cat([torch.from_numpy(to_numpy(x)).float() for x in xs])

    maps = None if results[0].saliency is None else cat(r.saliency for r in results)
    return maps, cat(r.logits for r in results)


def serve_onnx(
    repository: Any, model_path: Any, image_size: int, classes: int, batch: int, threads: int
) -> Any:
    """Chapter 9's served model: ``model_path`` (ONNX) in ONNX Runtime behind Triton, started.

    A Python-backend model ``task`` on the CPU (one instance with ``threads`` intra-op
    threads) with dynamic batching up to ``batch`` one-image requests, written to
    ``repository``; returns the started :class:`~helpers.serving.triton_server.TritonServer`
    (stop it with ``.stop()``).
    """
    from helpers.serving import triton_repo, triton_server

    spec = triton_repo.TensorSpec
    triton_repo.python_runtime_model(
        repository,
        "task",
        model_path,
        runtime="onnxruntime",
        inputs=[spec("image", (3, image_size, image_size))],
        outputs=[spec("logits", (classes,))],
        max_batch_size=batch,
        dynamic_batching=True,
        threads=threads,
    )
    return triton_server.TritonServer(repository, models=["task"]).start()


def served_reason(stats: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """Where a served image's time goes, from Triton's counters (``triton_client.model_stats``).

    One execution serves ``avg_batch`` images, so the server's compute per image is the compute
    per request over the mean batch; ``row`` is the served rung's row (its base: the same model
    run locally, timed in the same rounds).
    """
    busy = stats["compute_ms"] / max(stats["avg_batch"], 1e-9)
    base = row["stage"][row["base"]]
    local = base.median / base.items * 1e3
    return (
        f"the server computed {busy:.2f} ms per image (batches of {stats['avg_batch']:.1f} on "
        f"average, {stats['queue_ms']:.2f} ms queued per request) against {local:.2f} ms run "
        f"locally; the rest of its {row['ms_per_image']:.2f} ms is each request's round trip "
        "and its client's decoding, on the same cores"
    )


# ---- the ladder ----


# The case study's factor for each rung (Rung.key), from its article (helpers.record.reported).
REPORTED: dict[str, float] = {
    "graph": RESNET101_ONEFLOW["static_graph"],
    "pruning": RESNET101_ONEFLOW["pruning_total"],
    "batching": RESNET101_ONEFLOW["batch_1_to_16"],
    "pipelining": RESNET101_ONEFLOW["pipeline_2proc"],
    "precision": RESNET101_ONEFLOW["amp"],
    "compiler": RESNET101_ONEFLOW["compile_total"] / RESNET101_ONEFLOW["amp"],
}


def order_sentence(runs: Mapping[str, Measurement]) -> str:
    """Exercise 1's answer: precision and batching in the ladder's order and swapped.

    ``runs``: one interleaved run of ``pruned``, ``+ batching``, ``+ precision``, ``+ both``.
    """

    def r(a: str, b: str) -> RatioSummary:
        return paired_ratio(runs[a], runs[b])

    ladder = {"batching": r("pruned", "+ batching"), "precision": r("+ batching", "+ both")}
    swap = {"precision": r("pruned", "+ precision"), "batching": r("+ precision", "+ both")}
    moved = [k for k in ladder if ladder[k].apart_from(swap[k])]
    prod = [o["batching"].median * o["precision"].median for o in (ladder, swap)]
    return (
        f"The ladder's order: batching {ladder['batching'].short}, then precision "
        f"{ladder['precision'].short}; swapped: precision {swap['precision'].short}, then "
        f"batching {swap['batching'].short}. "
        + (
            f"The {' and '.join(moved)} factor changed with the order, beyond both intervals"
            if moved
            else "No factor moved beyond its intervals"
        )
        + f"; the products are {prod[0]:.2f}x and {prod[1]:.2f}x, and both orders end on one "
        f"timed path, {r('pruned', '+ both').short} over pruned."
    )


def _interval(ratio: RatioSummary) -> str:
    return f"{ratio.p25:.2f}-{ratio.p75:.2f}"


def ladder_table(lad: Ladder, title: str = "") -> Any:
    """The ladder as a :class:`helpers.show.Table`: each rung's pick, its base, factor, verdict."""
    from helpers.show import Table

    return Table(
        [
            {
                "rung": ("fwd: " if r["forward_only"] else "") + r["candidate"],
                "over": r["base"] or "-",
                "ms/image": r["ms_per_image"],
                "factor": r["factor"],
                "IQR": _interval(r["ratio"]) if r["base"] else "-",
                "verdict": r["verdict"],
                "cumulative": r["cumulative"],
                "case study": r["reported"],
            }
            for r in lad.rows
        ],
        title=title or None,
        formats={"ms/image": ".2f", "factor": ".2f", "cumulative": ".1f"},
        notes=[
            "factor: over the path in 'over' (the last kept one), timed in the same interleaved "
            "run: the median of per-round ratios with their interquartile range (IQR); kept "
            "only when the IQR lies above 1",
            "cumulative: the product of the kept factors (an estimate; the end-to-end figure "
            "below is measured)",
            "fwd: forward pass only (no saliency map): a different task, not in the end-to-end "
            "figure",
        ],
    )


def plot_ladder(lad: Ladder, ax: Any = None, title: str = "") -> Any:
    """The waterfall: each rung's step from the level it is measured over, beside the case study.

    Bars span from the level of the path a rung is measured over to the rung's own (log scale),
    with the level's chained interval as an error bar; a rung that was not kept is hatched and
    leaves the level where it was; forward-only rungs sit right of a dotted line. The measured
    end-to-end factor is drawn as a dashed line with its interval as a band.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    rows = lad.rows
    if not rows:
        raise ValueError("nothing to plot")
    ax = ax or plt.subplots(figsize=(10, 4.5))[1]
    x = np.arange(len(rows))
    level = {lad.naive: 1.0}
    for r in rows[1:]:
        if r["kept"]:
            level[r["candidate"]] = level[r["base"]] * r["factor"]
    level_r = 1.0
    ax.bar(x[0], 1.0, width=0.4, color="grey", alpha=0.4)
    labelled: set[str] = set()
    for i, r in enumerate(rows[1:], start=1):
        kind = "measured here, kept" if r["kept"] else "measured here, not kept"
        start = level[r["base"]]
        new = start * r["factor"]
        ax.bar(
            x[i] - 0.2,
            abs(new - start),
            bottom=min(start, new),
            width=0.38,
            color="C2" if r["forward_only"] else "C0",
            alpha=0.85 if r["kept"] else 0.3,
            hatch=None if r["kept"] else "//",
            label=None if kind in labelled else kind,
        )
        labelled.add(kind)
        ax.text(x[i] - 0.2, max(start, new) * 1.05, f"{r['factor']:.2f}x", ha="center", fontsize=7)
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
                new_r * 1.05,
                f"{r['reported']:.2f}x",
                ha="center",
                fontsize=7,
                color="C1",
            )
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
    ax.legend(fontsize=8)
    return ax


# ---- the page's sentences, generated from the numbers ----


def _task(lad: Ladder) -> list[dict[str, Any]]:
    return [r for r in lad.rows[1:] if not r["forward_only"]]


def _e2e(lad: Ladder) -> RatioSummary:
    if lad.end_to_end is None:
        return RatioSummary(1.0, 1.0, 1.0, 0, ())
    return lad.end_to_end


def headline(lad: Ladder, where: str, quick: str | None = None) -> str:
    """The end-to-end sentence: factor with its interval, where it was measured, quick-mode caveat.

    ``where`` names the device, precision and threads; ``quick`` (quick mode only) says what the
    quick sizes are, in the same sentence, so the figure is never read beside the case study's
    without it. The figure is the naive and the final path timed together.
    """
    caveat = f", a quick-mode figure ({quick})" if quick else ""
    if lad.end_to_end is None:
        return f"End to end on {where}{caveat}: no rung paid, the naive task is the final one."
    e2e = lad.end_to_end
    m = lad.final_stage
    naive = m[lad.naive].median / m[lad.naive].items * 1e3
    last = m[lad.final].median / m[lad.final].items * 1e3
    return (
        f"End to end on {where}{caveat}, the saliency task runs **{e2e.median:.1f}x** faster than "
        f"the naive task (naive and final path timed together: per-round IQR {_interval(e2e)} "
        f"over {e2e.rounds} rounds; {naive:.2f} -> {last:.2f} ms per image)."
    )


def _is_static(name: str) -> bool:
    return any(s in name for s in STATIC_GRAPHS)


def static_graph_line(lad: Ladder) -> str:
    """Whether the final path contains a static graph, and what each static-graph candidate gave."""
    task = _task(lad)
    final = [r for r in task if r["kept"]]
    static = [r for r in final if _is_static(r["candidate"])]
    tried = [
        f"{name} at the {r['rung']} rung, {ratio.verdict()}"
        for r in task
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


def dropped_lines(lad: Ladder) -> list[str]:
    """One line per rung that was not built on, and per candidate that failed its check."""
    lines = []
    for r in lad.rows[1:]:
        if not r["kept"]:
            lines.append(f"{r['candidate']}: {r['reason']}")
        elif r["reason"]:  # kept, but another candidate failed its check
            lines.append(f"{r['rung']}: {r['candidate']} kept; {r['reason']}")
    return lines


def explain_gap(
    lad: Ladder,
    ledger_rows: Sequence[Mapping[str, Any]],
    steps: Sequence[Step] | None = None,
) -> list[str]:
    """Sentences, generated from the numbers, on why the ledger's product differs from the ladder.

    ``ledger_rows`` are :func:`journey_rows` of ``steps`` (the chapters' factors). Each chapter
    step is set beside the ladder rungs of :data:`STEP_RUNGS`.
    """
    steps = TASK_STEPS if steps is None else steps
    e2e = _e2e(lad)
    task = _task(lad)
    product = math.prod(r["factor"] for r in task if r["kept"])
    lines = [
        f"The ladder's kept factors multiply to {product:.2f}x; the end-to-end figure, naive and "
        f"final path timed together, is {e2e.median:.2f}x (IQR {_interval(e2e)}): factors "
        "measured in separate runs multiply only approximately."
    ]
    measured = [r for r in ledger_rows if r["measured"] is not None]
    if measured:
        ledger_product = math.prod(r["measured"] for r in measured)
        way = "above" if ledger_product > e2e.median else "below"
        lines.append(
            f"The chapters' own factors multiply to {ledger_product:.2f}x, {way} the ladder's "
            f"{e2e.median:.2f}x. Each chapter measured its step against its own baseline "
            f"({', '.join(sorted({r['device'] + ' ' + r['precision'] for r in measured}))}), "
            "not on top of the steps before it."
        )
    dropped = [r for r in task if not r["kept"]]
    if dropped:
        lines.append(
            "Measured but not built on here: "
            + ", ".join(f"{r['candidate']} ({r['factor']:.2f}x, {r['verdict']})" for r in dropped)
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
    task = _task(lad)
    if not task:
        raise ValueError("no rungs above the baseline")
    kept = sorted((r for r in task if r["kept"]), key=lambda r: -r["factor"])
    lines = [
        f"on {device}, the steps that paid, largest first: "
        + (
            ", ".join(
                f"{r['candidate']} {r['factor']:.2f}x ({_interval(r['ratio'])})" for r in kept
            )
            or "none"
        )
    ]
    lines += [f"not built on: {line}" for line in dropped_lines(lad)]
    lines.append(static_graph_line(lad))
    e2e = lad.end_to_end
    lines.append(
        f"the saliency task end to end: {e2e} over the naive task, on the path "
        + " -> ".join([lad.naive, *(r["candidate"] for r in task if r["kept"])])
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


# ---- the chapters' own factors (the ledger view) ----


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


TASK_STEPS: tuple[Step, ...] = tuple(
    Step(key, label, *JOURNEY[key], RESNET101_ONEFLOW[reported])
    for key, label, reported in (
        ("static", "dynamic -> static (nn.Graph)", "static_graph"),
        ("pruning", "algorithmic pruning", "pruning_total"),
        ("parallel", "batch + pipeline", "parallel_total"),
        ("compile", "compile optimisations", "compile_total"),
    )
)

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
) -> list[dict[str, Any]]:
    """One row per step: the ledger's measured factor, the reported one, both cumulative.

    A step without a ledger record has ``measured=None`` and is skipped in the measured
    cumulative product (the row says which chapter to run). Each row names the ``device`` and
    ``precision`` of its record, :data:`NOT_RECORDED` where the record does not say; a step
    whose record is a ratio of medians across processes (chapter 6's chain) says so.
    """
    if not steps:
        raise ValueError("no steps given")
    idx = index_records(records)
    rows: list[dict[str, Any]] = []
    cum_m: float | None = None  # no product until a step was measured
    cum_r = 1.0
    for s in steps:
        rec = idx.get((s.chapter, s.record))
        value = float(rec["value"]) if rec is not None else None
        source = "ledger" if rec is not None else f"missing: run {s.chapter}"
        meta = rec
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"step {s.key!r} has a non-positive or non-finite factor {value!r}"
                )
            cum_m = value if cum_m is None else cum_m * value
        if s.reported is not None:
            cum_r *= s.reported
        across = rec is not None and "across processes" in str(rec.get("statistic", ""))
        rows.append(
            {
                "step": s.label + (" (medians across processes)" if across else ""),
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
