"""Chapter 6's report: its hidden cells' tables, sentences and chart (ch06_switches imports OneFlow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from IPython.display import display

from helpers import show
from helpers.compiling import graph_ops
from helpers.measure.measurement import RatioSummary, measurement_from_dict, paired_ratio
from helpers.record.reported import RESNET101_ONEFLOW as R
from helpers.show import plots

__all__ = [
    "FlowRun",
    "controls_text",
    "ablation_chart",
    "torch_tables",
    "cache_text",
    "summary_table",
]


@dataclass
class FlowRun:
    """The OneFlow variants' results (``flow_res``), their outputs, and whether on a GPU."""

    res: Mapping[str, Mapping[str, Any]]
    out: Mapping[str, np.ndarray]
    on_gpu: bool

    def ratio(self, before: str, after: str) -> float:
        """``after``'s speedup over ``before``: a ratio of medians."""
        return self.res[before]["median_s"] / self.res[after]["median_s"]

    def no_op(self, before: str, after: str) -> bool:
        """On a CPU: did a switch keep the graph op for op and the output bit for bit?"""
        same_ops = self.res[before]["op_counts"] == self.res[after]["op_counts"]
        return not self.on_gpu and same_ops and np.array_equal(self.out[before], self.out[after])

    def speedup(self, before: str, after: str) -> RatioSummary | float:
        """``after``'s speedup over ``before``: paired in one process, else :meth:`ratio`."""
        if self.res[before]["process"] != self.res[after]["process"]:
            return self.ratio(before, after)
        m = {n: measurement_from_dict(dict(self.res[n], label=n)) for n in (before, after)}
        return paired_ratio(m[before], m[after])

    def factor(self, before: str, after: str) -> str:
        """A switch's :meth:`speedup` (the ledger's figure) in words, its kind labelled."""
        s = self.speedup(before, after)
        if self.no_op(before, after):
            return f"no-op ({s.median if isinstance(s, RatioSummary) else s:.2f}x)"
        if isinstance(s, RatioSummary):
            return s.verdict() + " (in process)"
        return f"{s:.2f}x (across processes)"

    def cross_process_aa(self, a: str = "native padding", b: str = "native padding + MLIR"):
        """The same graph timed in two processes (``a`` / ``b``), or None if their ops differ."""
        same = self.res[a]["op_counts"] == self.res[b]["op_counts"]
        return self.ratio(a, b) if same else None

    def table(self, verdict: Mapping[str, str], title: str, threads: int) -> show.Table:
        """The variants, one row each: MLIR process, precision, ms per call, ops and check."""
        base, rows = self.res["graph"]["op_counts"], []
        for name, r in self.res.items():
            diff = graph_ops.op_diff(base, r["op_counts"])[:3]
            rows.append(
                {
                    "variant": name,
                    "MLIR pass": r["process"],
                    "precision": r["math_mode"],
                    "ms per call": r["median_s"] * 1e3,
                    "ops": graph_ops.total(r["op_counts"]),
                    "ops changed": ", ".join(f"{d['op']} {d['change']:+d}" for d in diff) or "-",
                    "check": verdict[name],
                }
            )
        busy = sum(bool(r["contended"]) for r in self.res.values())
        note = f"{threads} thread(s); {busy} of {len(rows)} variants timed while busy"
        return show.Table(rows, title=title, notes=[note + " (other processes took CPU time)"])


def controls_text(
    aa: RatioSummary, pads: RatioSummary, vs_native: RatioSummary, fusion: float
) -> str:
    """The three in-process controls as Markdown sentences; ``fusion``: pad+conv across processes."""
    more = "and more." if vs_native.p25 > 1 else "and no more, within this noise."
    if aa.conclusive:  # the twins differ beyond their own spread: this run cannot be trusted
        more += (
            " **The A/A control itself came out conclusive**: the machine's load moved one "
            "twin more than the other, so no OneFlow ratio of this run is a result."
        )
    return (
        f"**The A/A control.** *graph* against *graph again*: {aa.stated} over {aa.rounds} "
        "rounds: the noise of this measurement. **Explicit padding.** The plain graph with "
        "`explicit_padding`'s pad operators against the same graph on the native model: "
        f"{pads.stated}. **The fusion.** Measured as the chain does, across two processes, "
        f"pad+conv ran {fusion:.2f}x the plain graph's speed; against the native graph in its "
        f"own process it ran {vs_native.stated}, so it wins back the pads' cost {more}"
    )


def ablation_chart(
    own: Sequence,
    reported_step: Sequence,
    total: Sequence,
    reported_total: Sequence,
    no_op: Sequence,
) -> None:
    """Each chain step's own factor, and the running total, beside the case study's."""
    import matplotlib.pyplot as plt

    steps = ["+AMP", "+conv search", "+pad/conv", "+add"]
    labels = [s + ("\n(no-op here)" if n else "") for s, n in zip(steps, no_op)]
    axes = plt.subplots(1, 2, figsize=(14, 3.8))[1]
    plots.plot_speedups(labels, own, reported_step, ax=axes[0], title="each step's own factor")
    plots.plot_speedups(labels, total, reported_total, ax=axes[1], title="running total")
    plt.tight_layout()
    plt.show()


def cache_text(second: Mapping[str, Any], first_s: float, cpu_check_s: float, cpu: bool) -> str:
    """What a filled Inductor cache saved on a second start (``second``: the fresh process)."""
    warm, wall = second["result"]["first_call_s"], second["wall_s"]
    text = (
        f"With the cache filled, the first call took **{warm:.1f} s** instead of "
        f"{first_s:.0f} s ({first_s / warm:.0f}x less; one start each: a size, not a ratio "
        f"with a spread). The whole second start, interpreter, imports and model included, "
        f"took {wall:.0f} s"
    )
    if not cpu:
        return text + "."
    probe = second["result"]["isa_probe_s"]
    return text + (
        f", {probe:.0f} s of it ({probe / wall:.0%}) in Inductor's check of the CPU, which "
        "loads its test libraries again in every process (this notebook's first check, which "
        f"also built them: {cpu_check_s:.0f} s)."
    )


def summary_table(
    flow: FlowRun,
    chain: Sequence[str],
    torch_ratio: Mapping[str, RatioSummary],
    torch_out: Mapping[str, Any],
    *,
    low: str,
    controls: tuple[RatioSummary, RatioSummary, RatioSummary],
    trt_ratio: RatioSummary | None,
    title: str,
    torch_device: str,
) -> show.Table:
    """Each switch here (OneFlow alone, as a chain step; PyTorch's equivalent) and in the case study.

    ``controls``: OneFlow's A/A, pad+conv against native padding (both in process) and PyTorch's A/A.
    """
    import torch

    aa, vs_native, torch_aa = controls

    def torch_factor(name: str) -> str:
        if name not in torch_ratio:
            return "- (not here)"
        same = name in torch_out and torch.equal(torch_out[name], torch_out["eager fp32"])
        r = torch_ratio[name]
        return f"no-op ({r.median:.2f}x)" if torch_device == "cpu" and same else r.verdict()

    def case(step: str, total: str) -> str:
        return f"{R[step]:.2f}x (total {R[total]:.2f}x)"

    f, steps = flow.factor, list(zip(chain, chain[1:]))
    tc = "- (torch.compile)"
    rows = [
        ["AMP", f("graph", "AMP"), f(*steps[0]), torch_factor(f"autocast {low}"),
         case("amp", "compile_cumulative_amp")],
        ["conv algorithm search", f("graph", "conv search"), f(*steps[1]),
         torch_factor("cudnn.benchmark"),
         case("conv_algo_search", "compile_cumulative_amp_search")],
        ["pad+conv fusion",
         f("graph", "pad+conv") + f"; in process, vs native: {vs_native.verdict()}",
         f(*steps[2]), tc, case("pad_conv_fusion", "compile_cumulative_amp_search_pad")],
        ["add fusion", f("graph", "add fusion"), f(*steps[3]), tc,
         case("add_fusion", "compile_total")],
        ["BN folding", f("graph", "BN folding"), "-", torch_factor("conv+BN folded"), "-"],
        ["TF32 over IEEE float32", f("graph", "TF32") if "TF32" in flow.res else "- (no TF32)",
         "-", torch_factor("TF32"), "-"],
        ["all, in the case study's order", "-",
         f"{flow.ratio('graph', chain[-1]):.2f}x (total, across processes)",
         torch_factor(f"folded + channels-last + {low}"), f"{R['compile_total']:.2f}x (total)"],
        ["TensorRT, AMP + NHWC", "-", "-",
         trt_ratio.verdict() if trt_ratio else "- (GPU only)", f"{R['tensorrt_amp_nhwc']:.2f}x"],
    ]  # fmt: skip
    cross = flow.cross_process_aa()
    notes = [
        f"A/A controls in process: OneFlow {aa.verdict()}, PyTorch {torch_aa.verdict()}.",
        f"Across processes, the same graph (native padding) ran {cross:.2f}x in the pad+conv "
        "process's: a ratio across processes that is no further from 1 than this shows no effect."
        if cross
        else "Across processes there is no A/A control here (native padding's graph differs "
        "with the pad+conv pass): read those ratios as unpaired medians.",
    ]
    cols = ["optimisation", "OneFlow alone", "OneFlow, chain step", f"PyTorch ({torch_device})"]
    cols.append("case study")
    return show.Table([dict(zip(cols, row)) for row in rows], title=title, notes=notes)


def torch_tables(
    torch_times: Mapping,
    compiled_times: Mapping,
    torch_mode: Mapping,
    compile_s: Mapping,
    title: str,
) -> dict[str, RatioSummary]:
    """Show PyTorch's two interleaved runs as tables and their A/A control in a sentence.

    Returns each row's paired ratio over the ``"eager fp32"`` of its own run (the same rounds)."""
    meta = {n: {"precision": torch_mode[n]} for n in torch_mode}
    first = {n: {"compile s": f"{s:.0f}"} for n, s in compile_s.items()}  # first start
    cmeta = {n: meta[n] | first.get(n, {"compile s": "-"}) for n in compiled_times}
    for runs, m, t in (
        (torch_times, meta, title),
        (compiled_times, cmeta, "torch.compile, each mode compiled from an empty cache"),
    ):
        display(show.paired_table(runs, "eager fp32", meta=m, title=t))
    ratios = {
        n: paired_ratio(runs["eager fp32"], m)
        for runs in (torch_times, compiled_times)
        for n, m in runs.items()
        if n != "eager fp32"
    }
    aa = ratios["eager fp32 again"].stated
    show.say(
        f"The A/A control, *eager fp32* against *eager fp32 again*: {aa}: read every other "
        "row against it.",
        markdown=True,
    )
    return ratios
