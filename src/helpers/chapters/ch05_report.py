"""Chapter 5's report: the tables, plots and sentences of its hidden cells, from the run's numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from IPython.display import display

from helpers import show
from helpers.measure import batch_sweep
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.record import ledger
from helpers.record.reported import RESNET101_ONEFLOW as R
from helpers.show import plots

__all__ = [
    "dependence_table",
    "dependence_plot",
    "sweep_report",
    "kernel_report",
    "batching_report",
    "timelines",
    "runs_table",
    "verdicts",
    "case_study_table",
]
Ms = Mapping[int, Measurement]
PAIR, REPLICAS = "2 processes + lock", "2 replicas, no lock"


def dependence_table(
    eval_dep: Mapping, train_dep: Mapping, sal: Mapping, device: Any
) -> show.Table:
    """Each batch size: how far a sample's logits and maps moved inside a batch, vs alone."""
    cols = ("batch", "logits, eval", "logits, train", "maps, eval: 1 - cosine", "pixels within tol")
    rows = [
        dict(zip(cols, (b, eval_dep[b], train_dep[b], 1 - sal[b][0], f"{sal[b][1]:.1%}")))
        for b in eval_dep
    ]
    title = f"each sample inside batches vs alone ({device})"
    return show.Table(rows, floatfmt=".2e", title=title)


def dependence_plot(
    eval_dep: Mapping[int, float], train_dep: Mapping[int, float], tol: float
) -> None:
    """The logits' batch dependence, eval against train mode, beside the float32 bound."""
    import matplotlib.pyplot as plt

    ax = plt.subplots(figsize=(7, 3))[1]
    bs = [b for b in eval_dep if b > 1]
    at = np.arange(len(bs))
    ax.bar(at - 0.2, [max(eval_dep[b], 1e-12) for b in bs], 0.4, label="eval mode (deployed)")
    ax.bar(at + 0.2, [train_dep[b] for b in bs], 0.4, label="train mode")
    ax.axhline(tol, color="black", ls="--", lw=1, label=f"bound {tol:.1e} (fp32)")
    ax.set(yscale="log", xlabel="batch size", ylabel="max |difference| of logits")
    ax.set_xticks(at, [str(b) for b in bs])
    ax.set_title("Does a sample's output depend on its batch?")
    ax.legend(fontsize=8)
    plt.show()


def sweep_report(sweep: Ms, batch: int, where: str, rounds: int) -> show.Table:
    """The batch sweep (each batch size at its faster thread count) as two plots and a table."""
    import matplotlib.pyplot as plt

    rows = batch_sweep.sweep_rows(sweep)
    for r in rows:
        r["threads"] = sweep[r["batch"]].threads
    sizes, col = [r["batch"] for r in rows], lambda k: [r[k] for r in rows]
    axes = plt.subplots(1, 2, figsize=(12, 3.4))[1]
    plots.plot_sweep(
        sizes, {"latency per call (ms)": col("ms_per_call")},
        right={"throughput (images/s)": col("images_per_s")}, right_label="images/s",
        xlabel="batch size", ylabel="ms per call", ax=axes[0], title=f"the pruned task, {where}",
    )  # fmt: skip
    plots.plot_sweep(
        sizes, {"ms per image": col("ms_per_image")}, xlabel="batch size",
        ylabel="ms per image", ax=axes[1], title="cost per image",
    )  # fmt: skip
    plt.tight_layout()
    plt.show()
    note = f"contended (other processes took CPU time): {sweep[batch].contended}"
    return show.Table(rows, title=f"the pruned task, {where}, {rounds} rounds", notes=[note])


def kernel_report(
    kernels: Mapping[int, Mapping[str, int]], sweep: Ms, batch: int, device: Any
) -> dict[int, int]:
    """Convolutions per kernel at each profiled batch size and what they say; the slow-path counts."""
    small, slow = list(kernels), {b: k["slow path (im2col + matmul)"] for b, k in kernels.items()}
    ms = {b: sweep[b].median * 1e3 for b in small}
    rows = [{"batch": b, **kernels[b], "ms per call": ms[b]} for b in small]
    display(show.Table(rows, title=f"the pruned task's forward convolutions, by kernel ({device})"))
    b2, total = small[1], sum(kernels[1].values())
    two_paths = ". So a gain measured from batch 1 compares two kernel paths, not only one call's "
    show.say(
        f"At batch 1, {slow[1]} of the {total} convolutions ran on the slow path; at batch "
        f"{b2}, {slow[b2]}; at batch {batch}, {slow[batch]}. A call of {b2} images took "
        f"{ms[b2]:.1f} ms against {ms[1]:.1f} ms for one"
        + (two_paths + "work spread over more images." if slow[1] > slow[batch] else ".")
    )
    return slow


def batching_report(
    chapter: str, flow: RatioSummary, torch: RatioSummary, runs: Mapping[str, Ms], note: str
) -> show.Table:
    """This run's batching gains beside the committed reference runs', and what each batch used."""
    names = ("batch_gain_oneflow_graph", "batch_gain_torch")
    refs = "; ".join(
        f"reference run ({machine}): OneFlow {got[names[0]]:.2f}x, PyTorch {got[names[1]]:.2f}x"
        for machine, recs in ledger.reference_runs().items()
        for got in [{r["name"]: r["value"] for r in recs if r["chapter"] == chapter}]
        if set(names) <= set(got)
    )
    show.say(
        f"Batching here: OneFlow's graph {flow.verdict()}, PyTorch's task {torch.verdict()}"
        + (f"; {refs}." if refs else ".")
    )
    cols = ("run", "ms per image", "threads given", "cores busy (computing or spinning)")
    rows = [
        dict(zip(cols, (f"{fw}, batch {b}", m.median * 1e3 / b, m.threads, m.cores_used)))
        for fw, by_batch in runs.items()
        for b, m in by_batch.items()
    ]
    return show.Table(rows, title="the pruned task: what each batch size used", notes=[note])


def timelines(runs: Mapping[str, Any]) -> None:
    """One round's pipeline runs, one timeline each (``runs``: name -> PipelineRun)."""
    import matplotlib.pyplot as plt

    axes = plt.subplots(len(runs), 1, figsize=(11, 1.2 * len(runs) + 1), sharex=True)[1]
    for ax, run in zip(axes, runs.values()):
        plots.plot_timeline(run.events, ax=ax, title=f"{run.name}: {run.throughput:.0f} images/s")
    plt.tight_layout()
    plt.show()


def runs_table(
    walls: Mapping[str, Measurement],
    gains: Mapping[str, RatioSummary],
    rounds: Sequence[Mapping[str, Any]],
    title: str,
) -> show.Table:
    """Every pipeline run: images/s, its gain over serial (paired by round), startup, model busy."""
    rows = [
        {
            "run": n,
            "images/s (median)": walls[n].throughput,
            "vs serial (IQR)": gains[n].short,
            "verdict": "-" if n == "serial" else gains[n].reading,
            "startup s (untimed)": np.median([r[n].meta["startup_s"] for r in rounds]),
            "model busy": f"{min(1.0, rounds[-1][n].busy_fraction('infer')):.0%}",
        }
        for n in walls
    ]
    return show.Table(rows, title=title)


def verdicts(
    gain: Mapping[str, RatioSummary],
    batch: tuple[int, int],
    slow: Mapping[int, int],
    convs: int,
    walls: Mapping[str, Measurement],
    pipe: Mapping[str, Any],
    on_gpu: bool,
) -> None:
    """The chapter's verdict sentences, generated from the measured numbers.

    ``gain``: the batching gains ``torch``, ``forward`` and ``flow``; ``batch``: PyTorch's and
    OneFlow's batch sizes; ``pipe``: ``gains`` (vs serial), ``control``, ``over_control``,
    ``best_overlap`` and ``best_loader``.
    """
    torch_, (b, b_flow), gains = gain["torch"], batch, pipe["gains"]
    more = "More" if torch_.median > R["batch_1_to_16"] else "Less"
    lines = [
        f"Batching: {torch_.median:.2f}x for the task here, each batch size at its faster "
        f"thread count (case study: {R['batch_1_to_16']}x on a GPU); forward-only inference "
        f"{gain['forward'].median:.2f}x in the same rounds. {more} than the case study."
        + (
            f" At batch 1 PyTorch ran {slow[1]} of its {convs} convolutions on its slow path "
            "(counted above), so the gain also compares two kernel paths."
            if slow[1] > slow[b]
            else ""
        ),
        f"OneFlow's graph, batch 1 -> {b_flow}: {gain['flow'].verdict()}; PyTorch's task, "
        f"batch 1 -> {b}: {torch_.verdict()}.",
        f"The two processes + lock: {gains[PAIR]} over serial; the replicas without a lock: "
        f"{gains[REPLICAS]}; the stage times allowed at most {pipe['best_overlap']:.2f}x from "
        "overlap.",
        f"Over the better control ({pipe['control']}): {pipe['over_control'].verdict()}.",
    ]
    vs = paired_ratio(walls[REPLICAS], walls[PAIR])
    lines.append(
        "The model ran on the GPU, so loading on the CPU overlapped GPU work, as in the case "
        "study: the gain over the better control is the overlap the lock buys."
        if on_gpu
        else "No GPU: loading and the model compete for the same cores, so nothing is hidden "
        "behind a device; the lock design here is two one-thread processes sharing the cores, "
        "one of them loading at a time. Against the replicas without a lock, the lock version "
        f"was {vs.verdict(faster='faster (the lock helped)', slower='slower (the lock cost)')}."
    )
    lines.append(
        f"DataLoader: best {pipe['best_loader']}, {gains[pipe['best_loader']]} over serial."
    )
    for line in lines:
        show.say(line)


def case_study_table(
    gain: Mapping[str, RatioSummary],
    batch: tuple[int, int],
    pipe: Mapping[str, Any],
    on_gpu: bool,
    here: str,
    flow_device: Any,
    notes: Sequence[str],
) -> show.Table:
    """This run's gains beside the case study's; "batch + pipeline" only where they overlap.

    ``gain``, ``batch`` and ``pipe`` as :func:`verdicts` takes them."""
    total = gain["torch"].median * pipe["over_control"].median
    rows = [
        (f"batch 1 -> {batch[0]}", gain["torch"], f"{R['batch_1_to_16']} (1 -> 16)"),
        (f"batch 1 -> {batch[1]}, OneFlow graph ({flow_device})", gain["flow"],
         R["batch_1_to_16"]),
        (f"{PAIR} vs serial", pipe["gains"][PAIR], R["pipeline_2proc"]),
        (f"{REPLICAS} vs serial (control)", pipe["gains"][REPLICAS], None),
        (f"{PAIR} vs the better control ({pipe['control']})", pipe["over_control"], None),
        ("batch + pipeline", f"{total:.2f}x" if on_gpu else "n/a: no CPU/GPU overlap here",
         R["parallel_total"]),
    ]  # fmt: skip
    title = "the pruned task; each gain: median of per-round ratios (IQR)"
    return show.Table(
        [
            {"step": s, here: getattr(r, "short", r), "case study": f"{c}x" if c else "-"}
            for s, r, c in rows
        ],
        title=title,
        notes=notes,
    )
