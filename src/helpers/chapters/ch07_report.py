"""Chapter 7's report: the tables and generated sentences its hidden cells show, from its runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from helpers.deploy.export import op_counts
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.show.table import Table, paired_table

__all__ = [
    "levels_table",
    "wait_sentences",
    "precisions",
    "fps_tables",
    "headline",
    "lead_at_224",
    "summary_table",
]

ORT = "ONNX Runtime"


def levels_table(
    runners: Mapping[str, Any], runs: Mapping[str, Measurement], folder: Path, threads: int
) -> Table:
    """ONNX Runtime's levels: nodes and ORT-specific ops of ``folder/ort_<level>.onnx`` (the
    graph each session wrote), session seconds and batch-1 ms, the fastest level noted."""
    rows = []
    for level, runner in runners.items():
        ops = op_counts(Path(folder) / f"ort_{level}.onnx", with_domain=True)
        rows.append(
            {
                "level": level,
                "nodes": sum(ops.values()),
                "ORT-specific ops": sum(n for op, n in ops.items() if ":" in op),
                "session s": runner.info["session_s"],
                "batch 1 ms": runs[level].median * 1e3,
            }
        )
    fastest = min(rows, key=lambda r: r["batch 1 ms"])["level"]
    title = f"ONNX Runtime, CPU, fp32, {threads} threads: the exported graph per level"
    notes = [f"fastest at batch 1 here: '{fastest}' (median of interleaved rounds)"]
    return Table(rows, title=title, notes=notes)


def wait_sentences(
    waits: Mapping[str, Sequence[dict[str, Any]]],
    ratios: Mapping[str, RatioSummary],
    batch: int,
) -> str:
    """What the wait-policy table says (``ratios``: spinning over PASSIVE per call), ONNX
    Runtime's lead under each policy, whether the smaller call gains more, the machine's load."""
    one = ["PyTorch eager, batch 1", "ONNX Runtime, batch 1"]
    many = [f"PyTorch eager, batch {batch}", f"ONNX Runtime, batch {batch}"]
    lead = {
        p: np.median([r["rows"][one[0]]["median_s"] / r["rows"][one[1]]["median_s"] for r in rs])
        for p, rs in waits.items()
    }
    v = {c: r.verdict() for c, r in ratios.items()}
    text = (
        f"Spinning instead of sleeping: PyTorch eager at batch 1 **{v[one[0]]}**, "
        f"ONNX Runtime at batch 1 **{v[one[1]]}** (at batch {batch}: {v[many[0]]} and "
        f"{v[many[1]]}). ONNX Runtime's lead over PyTorch at batch 1, both under the same "
        f"policy: {lead['PASSIVE']:.1f}x when both sleep, {lead['spinning']:.1f}x when both spin. "
    )
    for small, large in zip(one, many):  # does the smaller call gain more from spinning?
        a, b = ratios[small], ratios[large]
        side = "higher" if a.median > b.median else "lower"
        how = "beyond both spreads" if a.apart_from(b) else "within each other's spread"
        text += (
            f"{small.split(',')[0]}: spinning's ratio at batch 1, {a.median:.2f}x, is {side} "
            f"than at batch {batch}, {b.median:.2f}x ({how}). "
        )
    if any(row["contended"] for rs in waits.values() for r in rs for row in r["rows"].values()):
        return text + (
            "Other processes took CPU time during these runs (*CONTENDED*): spinning "
            "threads then compete with them for the cores, and can lose badly."
        )
    return text + "The machine was quiet during these runs."


def precisions(contenders: Mapping[str, Any], torch_mode: str) -> dict[str, str]:
    """Each contender's precision: a PyTorch ``(model, dtype)`` pair's from its input dtype
    (fp16, or ``torch_mode``), a runtime's own ``math_mode``."""
    import torch

    return {
        k: ("fp16" if r[1] == torch.float16 else torch_mode)
        if isinstance(r, tuple)
        else r.math_mode
        for k, r in contenders.items()
    }


def fps_tables(
    runs: Mapping[int, Mapping[str, Measurement]],
    base: str,
    precision: Mapping[str, str],
    threads_at: Mapping[int, int],
    image_size: int,
) -> list[Table]:
    """One paired table per batch of the FPS runs, each row's precision beside its label."""
    meta = {k: {"precision": p} for k, p in precision.items()}
    title = "batch {}, {} px, {} thread(s) for every row".format
    return [
        paired_table(rs, base, meta=meta, title=title(b, image_size, threads_at[b]))
        for b, rs in runs.items()
    ]


def headline(
    runs: Mapping[int, Mapping[str, Measurement]],
    base: str,
    precision: Mapping[str, str],
    batch: int,
    wait: str,
) -> tuple[dict[int, tuple[str, RatioSummary]], str]:
    """Per batch: the fastest fp32 contender other than ``base`` and its paired ratio to it; and
    the FPS table's headline sentence on them at batch 1 and ``batch``."""
    rivals = [k for k, p in precision.items() if p == "fp32" and k != base]
    top = {b: max(rivals, key=lambda k: rs[k].throughput) for b, rs in runs.items()}
    out = {b: (top[b], paired_ratio(rs[base], rs[top[b]])) for b, rs in runs.items()}
    (top1, r1), (topb, rb) = out[1], out[batch]
    return out, (
        f"At batch 1 the fastest fp32 runtime here, {top1}, ran **{r1.stated}** than {base}; "
        f"at batch {batch}, {topb} ran {rb.stated}. Both frameworks' threads wait alike "
        f"(`OMP_WAIT_POLICY={wait}`)."
    )


def lead_at_224(
    runs: Mapping[int, Mapping[str, Measurement]], batch: int, title: str
) -> tuple[dict[str, Any], Table, str]:
    """ONNX Runtime's paired lead over every row at 224 px (``leads[(b, label)]``); at ``batch``
    over eager, over PyTorch's best path (``best_torch``: ``left``), the NCHWc layout's worth
    (``nchwc``), and the share of the gap PyTorch itself closes on a log scale (``closed``).
    With them, the runs as a table (ms per call, the lead) and what it says: how much of the
    lead is PyTorch's eager path."""
    leads = {(b, k): paired_ratio(rs[k], rs[ORT]) for b, rs in runs.items() for k in rs}
    paths = [k for k in runs[batch] if k.startswith("PyTorch")]
    best = min(paths, key=lambda k: leads[(batch, k)].median)
    eager, left = leads[(batch, "PyTorch eager")], leads[(batch, best)]
    nchwc = leads[(batch, "ONNX Runtime, no NCHWc")]
    closed = np.log(eager.median / left.median) / np.log(eager.median)
    lead = dict(leads=leads, best_torch=best, eager=eager, left=left, nchwc=nchwc, closed=closed)
    rows = [
        {
            "batch": b,
            "runtime": k,
            "ms per call": runs[b][k].median * 1e3,
            "ONNX Runtime's lead": "-" if k == ORT else r.verdict(),
        }
        for (b, k), r in leads.items()
    ]
    rest = (  # is the layout all of the remaining lead, or part of it?
        ": that layout is all of the remaining lead and more."
        if nchwc.median >= left.median
        else "; the rest is its fused kernels and lower per-operator cost."
    )
    text = (
        f"At 224 px, batch {batch}, ONNX Runtime ran **{eager.verdict()}** than "
        f"PyTorch eager (batch 1: {leads[(1, 'PyTorch eager')].verdict()}), and "
        f"{left.verdict()} than PyTorch's fastest path here ({best}). "
        f"So PyTorch itself closes about {closed:.0%} of the gap (log scale): that "
        "part is PyTorch's eager CPU path (a BatchNorm pass per convolution, a layout "
        "conversion around each convolution), not the runtime. Of what is left, ONNX "
        f"Runtime's blocked NCHWc layout is worth {nchwc.verdict()} (the same session "
        f"without it){rest}"
    )
    return lead, Table(rows, title=title), text


def summary_table(
    *,
    eager_fps: str,
    case_fps: float,
    top: Mapping[int, tuple[str, RatioSummary]],
    batch: int,
    lead: dict[str, Any],
    spin: Mapping[str, RatioSummary],
    aoti: str,
    nodes: tuple[int, int],
    pre_share: float,
    title: str,
) -> Table:
    """This run's figures beside case study 2's (``case_fps``: its PyTorch images/s at batch 1);
    ``top`` from :func:`headline`, ``lead`` from :func:`lead_at_224`, ``spin``: spinning's ratio
    per call, ``nodes``: the graph as captured and simplified."""
    (top1, r1), (topb, rb) = top[1], top[batch]
    rows = [
        ("PyTorch eager images/s, batch 1, timed alone", eager_fps),
        ("fastest fp32 runtime vs PyTorch eager, batch 1", f"{top1}: {r1.verdict()}"),
        (f"the same at batch {batch}", f"{topb}: {rb.verdict()}"),
        (
            f"ONNX Runtime at 224 px, batch {batch}: vs eager / vs best PyTorch",
            f"{lead['eager'].median:.1f}x / {lead['left'].median:.1f}x ({lead['best_torch']})",
        ),
        (
            "spinning instead of PASSIVE, batch 1: PyTorch / ONNX Runtime",
            " / ".join(f"{spin[f'{k}, batch 1'].median:.2f}x" for k in ("PyTorch eager", ORT)),
        ),
        ("AOTInductor: first build, file size, fresh-process check", aoti),
        ("graph nodes as captured -> simplified", f"{nodes[0]} -> {nodes[1]}"),
        ("pre-processing share of the intern's loop", f"{pre_share:.0%}"),
    ]
    case = [
        f"{case_fps:.0f} (224 px, GTX 1080 Ti, fp32)",
        "ONNX Runtime, then TensorRT",
        *["-"] * 4,
        "conv+BN folding, reshape removal",
        "profile first",
    ]
    return Table(
        [{"measurement": m, "here": h, "case study": c} for (m, h), c in zip(rows, case)],
        title=title,
    )
