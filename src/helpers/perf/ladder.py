"""The capstone's speed-up ladder (chapter 10): step factors from the ledger, waterfall, decision guide.

Each step of case study 1 is a speedup factor measured by one chapter and stored in the
ledger. :func:`journey_rows` lines them up beside the reported factors; missing steps are
reported as missing (and which chapter measures them), never invented. Every row carries the
device and the math precision its record names (``device=`` / ``precision=`` metadata), or
:data:`NOT_RECORDED` when the chapter that wrote it did not say: a factor is only meaningful
together with where and how it was measured.

Why a module although only chapter 10 uses it: this is ledger arithmetic and plotting, plumbing.
Looking records up by chapter and name, multiplying factors, re-measuring a missing step and
drawing a waterfall teach nothing the earlier chapters did not; what the capstone teaches, the
optimised task assembled from the chapters' pieces and checked against the naive one, is written
on its page. The record names in :data:`TASK_STEPS` are the ones chapters 3-6 write.

Why a module: ledger arithmetic, table and plot plumbing for the capstone; what it computes is
printed on the page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.core.reported import RESNET101_ONEFLOW

__all__ = [
    "NOT_RECORDED",
    "Step",
    "TASK_STEPS",
    "best_by_batch",
    "first_record",
    "index_records",
    "journey_rows",
    "measured_on",
    "missing_steps",
    "plot_waterfall",
    "recommend",
    "remeasure_task_steps",
    "runtime_table",
    "time_per_item",
]


NOT_RECORDED = "not recorded"  # a record without device / precision metadata


def _meta(record: Mapping[str, Any] | None, key: str) -> str:
    """``record[key]`` as text (``device`` or ``precision``), or :data:`NOT_RECORDED`."""
    value = record.get(key) if record is not None else None
    text = "" if value is None else str(value).strip()
    return text or NOT_RECORDED


def measured_on(record: Mapping[str, Any] | None) -> str:
    """``'<device>, <precision>'`` of a ledger record, e.g. ``'cuda, tf32'`` (or 'not recorded')."""
    return f"{_meta(record, 'device')}, {_meta(record, 'precision')}"


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
        "oneflow_graph_speedup_batch1",
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


def missing_steps(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Labels of steps that have no measured factor."""
    return [r["step"] for r in rows if r["measured"] is None]


def runtime_table(
    records: Iterable[Mapping[str, Any]], chapter: str = "07_onnx_runtimes"
) -> list[dict[str, Any]]:
    """Images/s by runtime and batch size from a chapter's ``fps_<runtime>_batch<N>`` records.

    Each row also carries the ``mode`` (quick or full) the record was measured in, and the
    ``device`` and ``precision`` it names (:data:`NOT_RECORDED` where it names none).
    """
    rows = []
    for r in records:
        m = re.fullmatch(r"fps_(.+)_batch(\d+)", r["name"]) if r["chapter"] == chapter else None
        if m:
            rows.append(
                {
                    "runtime": r.get("runtime", m.group(1)),
                    "batch": int(m.group(2)),
                    "device": _meta(r, "device"),
                    "precision": _meta(r, "precision"),
                    "images_per_s": r["value"],
                    "mode": r.get("mode"),
                }
            )
    return sorted(rows, key=lambda row: (row["batch"], -row["images_per_s"]))


def best_by_batch(table: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The fastest runtime row for each batch size of :func:`runtime_table`."""
    best: dict[int, Mapping[str, Any]] = {}
    for row in table:
        if row["batch"] not in best or row["images_per_s"] > best[row["batch"]]["images_per_s"]:
            best[row["batch"]] = row
    return best


def plot_waterfall(rows: Sequence[Mapping[str, Any]], ax: Any = None, title: str = "") -> Any:
    """Cumulative speedup after each step (log scale), measured here beside reported, as a waterfall."""
    import matplotlib.pyplot as plt
    import numpy as np

    if not rows:
        raise ValueError("nothing to plot")
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    labels = ["naive"] + [r["step"] for r in rows]
    x = np.arange(len(labels))
    for offset, key, color, name in (
        (-0.2, "measured", "C0", "measured here"),
        (0.2, "reported", "C1", "reported"),
    ):
        level = 1.0
        for i, r in enumerate(rows, start=1):
            factor = r[key]
            if factor is None:
                ax.text(
                    x[i] + offset, level, "n/a", ha="center", va="bottom", fontsize=7, color=color
                )
                continue
            new = level * factor
            ax.bar(
                x[i] + offset,
                new - level if new >= level else level - new,
                bottom=min(level, new),
                width=0.38,
                color=color,
                alpha=0.85 if new >= level else 0.4,
                label=name if i == 1 else None,
            )
            ax.text(
                x[i] + offset,
                max(level, new),
                f"{factor:.2f}x",
                ha="center",
                va="bottom",
                fontsize=7,
            )
            level = new
        ax.bar(x[0] + offset, 1.0, width=0.38, color=color, alpha=0.3)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=15, ha="right")
    ax.set_ylabel("cumulative speedup (x, log scale)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def recommend(
    best: Mapping[int, Mapping[str, Any]], has_gpu: bool, int8: Mapping[str, Any] | None = None
) -> list[str]:
    """Short decision-guide lines backed by the measured best runtimes (and an INT8 record, if any).

    ``int8`` is one of chapter 8's ledger records of INT8 speed over fp32 eager PyTorch; the line
    names the record and the size it was measured at. Quick-mode measurements get a caveat.
    """
    if not best:
        return ["No runtime measurements in the ledger yet: run chapter 7 first."]
    lines = []
    for batch, row in sorted(best.items()):
        regime = "latency (batch 1)" if batch == 1 else f"throughput (batch {batch})"
        where = [_meta(row, k) for k in ("device", "precision")]
        known = ", ".join(w for w in where if w != NOT_RECORDED)
        lines.append(
            f"{regime}: fastest here was {row['runtime']} at {row['images_per_s']:.0f} images/s"
            + (f" ({known})" if known else "")
        )
    if any(row.get("mode") == "quick" for row in best.values()):
        lines.append(
            "these are quick-mode sizes (small images, a narrow network), where per-call "
            "overhead weighs more than at deployment size: measure in full mode before choosing"
        )
    if int8:
        size = ", ".join(
            f"{k} {int8[k]}"
            for k in ("arch", "image_size", "batch", "device", "precision")
            if k in int8
        )
        lines.append(
            f"INT8 (chapter 8's {int8['name']}{'; ' + size if size else ''}): "
            f"{int8['value']:.2f}x over fp32 eager PyTorch here, at the accuracy cost chapter 8 "
            "measured"
        )
    lines.append(
        "with a GPU: ONNX Runtime's TensorRT EP (fp16/INT8) or the CUDA EP; static graphs pay "
        "off most"
        if has_gpu
        else "no GPU here: ONNX Runtime or OpenVINO on the CPU, bf16 where the CPU has AVX-512 "
        "BF16/AMX, INT8 with VNNI"
    )
    return lines


def first_record(
    records: Iterable[Mapping[str, Any]], chapter: str, names: Sequence[str]
) -> Mapping[str, Any] | None:
    """The first of ``names`` that the ledger holds for ``chapter`` (None if none)."""
    idx = index_records(records)
    for n in names:
        if (chapter, n) in idx:
            return idx[(chapter, n)]
    return None


def time_per_item(
    fn: Callable[[], Any], items: int, *, framework: str, warmup: int, repeats: int
) -> float:
    """Median seconds per item of ``fn`` (which processes ``items`` items), honestly timed."""
    from helpers.core.benchmarking import benchmark

    return (
        benchmark(fn, framework=framework, warmup=warmup, repeats=repeats, items=items).median
        / items
    )


def remeasure_task_steps(
    torch_model: Any,
    arch: str,
    x: Any,
    keys: Sequence[str],
    *,
    device: Any = "cpu",
    warmup: int = 2,
    repeats: int = 5,
) -> dict[str, float]:
    """Re-measure the cheap task steps a ledger lacks: ``static`` and/or ``pruning`` (OneFlow).

    ``torch_model`` is an eval-mode torchvision ResNet ``arch`` (on any device); its weights go to
    a flowvision twin on the OneFlow ``device`` (e.g. ``flow_device()``), and so does ``x`` (a
    torch tensor): every timed call of a factor runs on that one device.
    ``static`` = eager original task / ``nn.Graph`` original task; ``pruning`` = graph original /
    graph pruned (``single_forward``), both at the batch of ``x``.
    """
    from helpers.core.environment import import_oneflow
    from helpers.workload import saliency as st
    from helpers.workload.models import build_resnet, twin

    unknown = set(keys) - {"static", "pruning"}
    if unknown:
        raise ValueError(
            f"only 'static' and 'pruning' can be re-measured here, not {sorted(unknown)}"
        )
    if not keys:
        return {}
    flow = import_oneflow()
    fdev = flow.device(str(device))
    fm = (
        twin(torch_model, "oneflow", build_resnet, arch, num_classes=torch_model.fc.out_features)
        .eval()
        .to(fdev)
    )
    xf = flow.tensor(x.detach().cpu().numpy(), device=fdev)
    n = int(x.shape[0])

    def per_item(task: Callable[[Any], Any]) -> float:
        """Median seconds per image of ``task`` on ``xf``."""
        return time_per_item(
            lambda: task(xf), n, framework="oneflow", warmup=warmup, repeats=repeats
        )

    t_graph_orig = per_item(st.make_graph_task(fm, "original", tuple(xf.shape)))
    out: dict[str, float] = {}
    if "static" in keys:
        out["static"] = per_item(st.make_task(fm, "original")) / t_graph_orig
    if "pruning" in keys:
        out["pruning"] = t_graph_orig / per_item(
            st.make_graph_task(fm, "single_forward", tuple(xf.shape))
        )
    return out
