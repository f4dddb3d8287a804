"""The capstone's speed-up ladder (chapter 10; the engine: :mod:`helpers.measure.ladder`): the
test images whose saliency map does not depend on float32 summation order, the served rung, the
case study's factor per rung, and the chapters' own factors from the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from helpers.measure.ladder import Ladder
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.record.ledger_names import JOURNEY
from helpers.record.reported import RESNET101_ONEFLOW
from helpers.show.table import Table

__all__ = [
    "order_stable_images",
    "answer",
    "serve_onnx",
    "served_reason",
    "order_sentence",
    "REPORTED",
    "ladder_table",
    "journey_rows",
]


NOT_RECORDED = "not recorded"  # a record without device / precision metadata


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

    ReLU and max-pooling choose a branch wherever their inputs tie (flat regions of a generated
    JPEG make near-ties): there another float32 summation order (batch, threads) can pick
    another, equally valid map. ``task`` runs in strict float32 one image per call, in batches of
    ``batch`` on ``threads`` threads and on one; an image is kept when its three maps agree
    within float32's bound at the maps' scale, and of those the ``n`` with the widest top-2 logit
    margin are chosen. Raises when fewer than ``n`` are stable.
    """
    import torch

    from helpers.core import precision
    from helpers.core.threads import torch_threads

    total = len(x)
    if not 1 <= n <= total:
        raise ValueError(f"n must be in 1..{total}, got {n}")
    with precision.strict_fp32():  # maps one image per call, then batched on t threads
        ref, logits = answer(task(x[i : i + 1]) for i in range(total))
        orders = []
        for t in (threads, 1):
            with torch_threads(t):
                orders.append(answer(task(x[i : i + batch]) for i in range(0, total, batch))[0])
    scale = precision.output_scale(ref, floor=0.0)
    tol = precision.tolerance("fp32", network=network, scale=scale).as_kwargs()
    close = [torch.isclose(o, ref, **tol).flatten(1).all(1) for o in orders]
    stable = torch.stack(close).all(0)
    top2 = logits.topk(2, dim=1).values
    margin = top2[:, 0] - top2[:, 1]
    ranked = [i for i in margin.argsort(descending=True).tolist() if stable[i]]
    if len(ranked) < n:
        raise AssertionError(
            f"only {len(ranked)} of {total} images have an order-independent map; need {n} "
            "(generate a larger pool)"
        )
    keep = tuple(sorted(ranked[:n]))
    return ImageChoice(keep, total, int((~stable).sum()), float(margin[list(keep)].min()))


def answer(results: Iterable[Any]) -> tuple[Any, Any]:
    """All images' saliency maps and logits, in image order, as float32 CPU tensors, from the
    task's answers (PyTorch or OneFlow tensors, NumPy arrays) one per call; ``None`` for the maps
    of forward-only answers (``saliency=None``)."""
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
    """Chapter 9's served model, started: ``model_path`` (ONNX) in ONNX Runtime behind Triton, a
    Python-backend model ``task`` on the CPU (one instance, ``threads`` intra-op threads) with
    dynamic batching up to ``batch`` one-image requests. Stop it with ``.stop()``."""
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
    """Where a served image's time goes, from Triton's counters (``triton_client.model_stats``):
    compute per request over the mean batch, against ``row``'s base (the served rung's row: the
    same model run locally, in the same rounds)."""
    busy = stats["compute_ms"] / max(stats["avg_batch"], 1e-9)
    local = 1e3 / row["stage"][row["base"]].throughput
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
    """Exercise 1's answer: precision and batching in the ladder's order and swapped, from one
    interleaved run of ``pruned``, ``+ batching``, ``+ precision``, ``+ both``."""

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


def ladder_table(lad: Ladder, title: str = "") -> Table:
    """The ladder as a Table: each rung's pick, its base, factor, verdict."""
    return Table(
        [
            {
                "rung": ("fwd: " if r["forward_only"] else "") + r["candidate"],
                "over": r["base"] or "-",
                "ms/image": r["ms_per_image"],
                "factor": r["factor"],
                RatioSummary.SPREAD: r["ratio"].interval if r["base"] else "-",
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
            "run: the median of per-round ratios with their interquartile range (per-round "
            "IQR); kept only when that interval lies above 1",
            "cumulative: the product of the kept factors (an estimate; the end-to-end figure "
            "below is measured)",
            "fwd: forward pass only (no saliency map): a different task, not in the end-to-end "
            "figure",
        ],
    )


# ---- the chapters' own factors (the ledger view) ----


@dataclass(frozen=True)
class Step:
    """One step of the journey: where its measured factor lives, what the case study reported,
    and the ladder rungs (``Rung.key``) it is set beside."""

    key: str
    label: str
    chapter: str
    record: str
    reported: float
    rungs: tuple[str, ...]


TASK_STEPS: tuple[Step, ...] = tuple(
    Step(key, label, *JOURNEY[key], RESNET101_ONEFLOW[reported], rungs)
    for key, label, reported, rungs in (
        ("static", "dynamic -> static (nn.Graph)", "static_graph", ("graph",)),
        ("pruning", "algorithmic pruning", "pruning_total", ("pruning",)),
        ("parallel", "batch + pipeline", "parallel_total", ("batching", "pipelining")),
        ("compile", "compile optimisations", "compile_total", ("precision", "compiler")),
    )
)


def journey_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per step of :data:`TASK_STEPS`: the ledger's measured factor, the reported one,
    both cumulative; a step without a ledger record has ``measured=None`` and says which chapter
    to run, a ratio of medians across processes (chapter 6's chain) says so."""
    idx = {(r["chapter"], r["name"]): r for r in records}
    rows: list[dict[str, Any]] = []
    cum_m: float | None = None  # no product until a step was measured
    cum_r = 1.0
    for s in TASK_STEPS:
        rec = idx.get((s.chapter, s.record), {})
        value = float(rec["value"]) if rec else None
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"step {s.key!r} has a non-positive or non-finite factor {value!r}"
                )
            cum_m = value if cum_m is None else cum_m * value
        cum_r *= s.reported
        across = "across processes" in str(rec.get("statistic", ""))
        rows.append(
            {
                "step": s.label + " (medians across processes)" * across,
                **{
                    k: str(rec.get(k) or "").strip() or NOT_RECORDED
                    for k in ("device", "precision")
                },
                "measured": value,
                "reported": s.reported,
                "cumulative_measured": cum_m,
                "cumulative_reported": cum_r,
                "source": "ledger" if rec else f"missing: run {s.chapter}",
            }
        )
    return rows
