"""Chapter 8's report: the tables and generated sentences its hidden cells show."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from IPython.display import display

from helpers.measure.measurement import Measurement, paired_ratio
from helpers.record.ledger import slug
from helpers.show.plots import plot_speed_accuracy, plot_speedups
from helpers.show.table import CORES_BUSY, Table
from helpers.show.text import say

__all__ = [
    "ratio_of",
    "variant_records",
    "model_name",
    "variants_table",
    "training_table",
    "preprocess_sentence",
    "checks_table",
    "speed_report",
    "small_model_sentences",
    "target_report",
    "plot_speed_against_accuracy",
    "embedder_table",
    "ablation_report",
    "embedder_speed_sentences",
    "summary_table",
]


def ratio_of(rows: Iterable[Mapping[str, Any]], name: str) -> Any:
    """The paired ratio ``measure_variants`` computed for ``name`` against its baseline."""
    return next(r["ratio"] for r in rows if r["variant"] == name)


def variant_records(
    timed: Mapping[int, tuple[list, dict]],
) -> Iterator[tuple[int, str, Measurement, dict[str, Any]]]:
    """Per batch and variant of ``measure_variants`` runs: the batch and the variant's slug (the
    record name's parts), its Measurement, and its batch and precision."""
    for b, (rows, runs) in timed.items():
        for r in rows:
            how = {"batch": b, "precision": r["precision"]}
            yield b, slug(r["variant"]), runs[r["variant"]], how


def model_name(arch: str) -> str:
    """``'resnet18'`` -> ``'ResNet-18'``; other names unchanged."""
    return f"ResNet-{arch[6:]}" if arch.startswith("resnet") and arch[6:].isdigit() else arch


def variants_table(
    rows: Iterable[Mapping[str, Any]], accuracy_label: str = "accuracy", **kwargs: Any
) -> Table:
    """The rows of ``measure_variants`` as a Table, numbers kept; ``accuracy`` (column
    ``accuracy_label``: say the model when it is not the timed one) where a row has one."""
    out = []
    for r in rows:
        row = {
            "variant": r["variant"],
            "precision": r["precision"],
            "threads": r["threads"],
            "s / batch": r["median_s"],
            "IQR": f"{r['p25_s']:.3f}-{r['p75_s']:.3f}",
            "vs eager": r["vs_eager"],
            CORES_BUSY: r.get("cores_used"),
        }
        if "pct_of_ceiling" in r:
            row["% of own ceiling"] = r["pct_of_ceiling"] if r["ceiling_gops"] else None
            row["ceiling GOP/s"] = r["ceiling_gops"]
        if r.get("accuracy") is not None:
            row[accuracy_label] = r["accuracy"]
            row["drop (points)"] = r["drop_points"]
        out.append(row)
    formats = {"s / batch": ".3f", "% of own ceiling": ".0f", "ceiling GOP/s": ".0f"}
    formats.update({accuracy_label: ".2%", "drop (points)": "+.2f"})
    return Table(out, formats={k: v for k, v in formats.items() if k in out[0]}, **kwargs)


def check_text(c: Any) -> str:
    """A task-level check (:class:`helpers.core.comparison.TaskCheck`) in one cell, or, for a
    caught error, why it FAILS."""
    if isinstance(c, BaseException):
        return "FAILS: " + str(c).split("check: ", 1)[-1]
    return f"passes ({c.mode}): {c.brief()}"


def training_table(result: Any, untrained: float, needed: float, model: str) -> Table:
    """The training run and the learned-check's numbers as one table row."""
    row = {
        "model": model,
        "steps": result.steps,
        "seconds": result.seconds,
        "device": f"{result.device} ({result.math_mode})",
        "held-out accuracy": result.val_accuracy,
        "untrained (control)": untrained,
        "needed": needed,
    }
    shares = ("held-out accuracy", "untrained (control)", "needed")
    return Table([row], formats={"seconds": ".0f", **dict.fromkeys(shares, ".1%")})


def preprocess_sentence(graph_ops: Mapping[str, Mapping[str, int]]) -> str:
    """What ``quant_pre_process`` changed, from the op counts before and after."""
    before, after = graph_ops["exported"], graph_ops["pre-processed"]
    bn0, bn1 = before.get("BatchNormalization", 0), after.get("BatchNormalization", 0)
    n0, n1 = sum(before.values()), sum(after.values())
    text = (
        f"The exported graph has {n0} nodes, {bn0} of them BatchNormalization; after "
        f"pre-processing, {n1} nodes and {bn1} BatchNormalization."
    )
    if bn0 == 0:
        return text + (
            " PyTorch's exporter had already folded every BatchNorm into its convolution "
            "(its default optimizer does, for a model in eval mode: chapter 7), so "
            "pre-processing had nothing to fold here; "
            "it matters for graphs that still carry BatchNorm nodes."
        )
    return text + f" Pre-processing folded {bn0 - bn1} of them into their convolutions."


def checks_table(
    checks: Mapping[str, Any],
    acc: Mapping[str, float],
    base: str,
    names: Iterable[str] | None = None,
    *,
    fp32: Any = None,
    planted: tuple[BaseException, float] | None = None,
) -> Table:
    """The task-level checks (``names``, default all) and held-out accuracies as one table.

    ``fp32`` (a :class:`helpers.core.comparison.Comparison`) adds the float32 row; ``planted``
    (the caught error, the buggy model's accuracy) a row for the planted bug that had to fail.
    """
    rows = [(k, check_text(checks[k]), acc[k]) for k in (checks if names is None else names)]
    if fp32 is not None:
        used = f"float32 bound, {fp32.used:.2g} of it used"
        rows.insert(0, ("ORT fp32", used, acc.get("ORT fp32", acc[base])))
    if planted is not None:
        err, bug_acc = planted
        reason = str(err).split(": ", 1)[-1].split(";")[0]
        bug = "planted bug: calibrated on un-normalised images"
        rows.append((bug, f"FAILS, as it must ({reason})", bug_acc))
    notes = []
    if any(check.startswith("FAILS:") for _, check, _ in rows):
        notes.append(
            "A variant that FAILS lost more accuracy than allowed, flipped a decision its "
            "precision cannot flip, or moved a row nearer another class's logits: it is not the "
            "fp32 model's task. Section 7 and the closing table name the fastest path that passed."
        )
    keys = ("variant", "check", "accuracy", "drop (points)")
    rows = [
        dict(zip(keys, (k, c, f"{a:.2%}", f"{100 * (acc[base] - a):+.2f}"))) for k, c, a in rows
    ]
    return Table(rows, title=f"held-out checks against {base} ({acc[base]:.2%})", notes=notes)


def speed_report(
    timed: Mapping[int, tuple[list, dict]], title: str, runtime: str, sentences: list[str]
) -> None:
    """Show the throughput per variant at each batch size of ``timed`` ({batch:
    measure_variants(...)}) as a table, then ``sentences`` and the wait policy's."""
    from helpers.chapters.ch08_cpu_target import wait_policy

    batches = sorted(timed)
    first_rows = timed[batches[0]][0]
    rows = []
    for r in first_rows:
        name = r["variant"]
        row: dict[str, Any] = {"variant": name, "precision": r["precision"]}
        for b in batches:
            m = timed[b][1][name]
            row[f"batch {b}: images/s"] = m.throughput
            row[f"batch {b}: IQR"] = f"{100 * m.relative_iqr:.0f}%"
        row[CORES_BUSY] = timed[batches[-1]][1][name].cores_used
        rows.append(row)
    threads = {r["threads"] for r in first_rows}
    contended = any(m.contended for _, runs in timed.values() for m in runs.values())
    table = Table(
        rows,
        floatfmt=".0f",
        formats={CORES_BUSY: ".2f"},
        title=f"{title}, {'/'.join(map(str, sorted(threads)))} threads, interleaved rounds"
        + (" (CONTENDED: other processes shared the cores)" if contended else ""),
    )
    display(table)
    say(sentences + wait_policy_sentences(timed, runtime, wait_policy()), markdown=True)


def _per_batch(timed: Mapping[int, tuple[list, dict]], base: str, other: str) -> str:
    """``other`` against ``base`` at each batch size, paired by round: '1.5x faster at batch 1, ...'."""
    pairs = sorted(timed.items())
    return ", ".join(
        f"{paired_ratio(r[base], r[other]).verdict()} at batch {b}" for b, (_, r) in pairs
    )


def _fixed_share(timed: Mapping[int, tuple[list, dict]], name: str) -> tuple[float, float]:
    """(fixed seconds per call, their share of the largest batch's call) from two batch sizes."""
    b1, bn = min(timed), max(timed)
    t1, tn = timed[b1][1][name].median, timed[bn][1][name].median
    per_item = min(max((tn - t1) / (bn - b1), 0.0), t1 / b1)  # noise can push it outside
    fixed = t1 - b1 * per_item
    return fixed, fixed / tn


def small_model_sentences(
    timed: Mapping[int, tuple[list, dict]], executed: Mapping[str, Mapping[str, int]], size: int
) -> list[str]:
    """The claims section 6's timings support, each from per-round ratios (with a verdict)."""
    u8, s8, base = "ORT int8 (QDQ, U8S8)", "ORT int8 (QDQ, S8S8)", "PyTorch eager fp32"
    bn = max(timed)
    runs_n = timed[bn][1]
    k = "integer convs (QLinearConv)"
    out = [
        f"At {size}x{size} and batch {bn}, U8S8 against S8S8: "
        f"**{paired_ratio(runs_n[s8], runs_n[u8]).verdict()}** "
        f"(ONNX Runtime executed {executed['U8S8'][k]} integer convolutions for U8S8, "
        f"{executed['S8S8'][k]} for S8S8)."
    ]
    out.append(f"ORT INT8 (U8S8) against ORT fp32: {_per_batch(timed, 'ORT fp32', u8)}.")
    out.append(f"Against fp32 eager PyTorch at batch {bn}: {ratio_of(timed[bn][0], u8).verdict()}.")
    fixed_i, share_i = _fixed_share(timed, u8)
    share_f, share_e = (_fixed_share(timed, k)[1] for k in ("ORT fp32", base))
    out.append(
        f"Of a batch-{bn} call, costs that do not grow with the batch (dispatch, quantizing the "
        f"input, Python) take {share_i:.0%} in ORT INT8 ({1e3 * fixed_i:.2f} ms), {share_f:.0%} "
        f"in ORT fp32 and {share_e:.0%} in eager PyTorch; the rest is arithmetic, the part "
        "INT8 speeds up."
    )
    return out


def wait_policy_sentences(
    timed: Mapping[int, tuple[list, dict]], runtime: str, policy: str
) -> list[str]:
    """Which wait policy each side ran under, and ``runtime`` over PyTorch on both thread counts:
    fp32 eager, and on one thread, where no thread waits (chapter 7's rule); without that row (a
    one-core machine), only the policy is stated."""
    one, base = "PyTorch eager fp32, 1 thread", "PyTorch eager fp32"
    b1 = min(timed)
    if one not in timed[b1][1]:
        return [f"Wait policy: {policy}."]
    n = next(r["threads"] for r in timed[b1][0] if r["variant"] == base)
    cost = _per_batch(timed, base, one)
    lead = "; ".join(
        f"at batch {b}, {paired_ratio(runs[base], runs[runtime]).short} over PyTorch on {n} "
        f"threads and {paired_ratio(runs[one], runs[runtime]).short} over PyTorch on one"
        for b, (_, runs) in sorted(timed.items())
    )
    return [
        f"Wait policy: {policy}. PyTorch eager on one thread, where no thread ever waits, "
        f"against the same PyTorch on {n} threads under that policy: {cost}.",
        f"{runtime} against PyTorch (median, per-round IQR): {lead}. Chapter 7 gives every "
        "framework PyTorch's fastest thread count; where one thread is it, the second figure "
        "is the one to compare with chapter 7's.",
    ]


def ceiling_share(row: Mapping[str, Any]) -> str:
    """``'45% of this CPU's int8 ceiling'``, or that there is none: a CPU without 8-bit
    dot-product instructions gets no int8 ceiling (:func:`helpers.measure.roofline.ceilings`)."""
    pct = row.get("pct_of_ceiling")
    if pct is None or pct != pct:  # NaN: no ceiling of this precision was measured here
        return f"no {row['precision']} ceiling measured on this CPU"
    return f"{pct:.0f}% of this CPU's {row['precision']} ceiling"


def target_sentences(
    rows: list[Mapping[str, Any]],
    runs: Mapping[str, Measurement],
    ceilings: Mapping[str, float],
    top: Mapping[str, Any],
    top_passed: Mapping[str, Any],
    cross_cosine: float,
) -> list[str]:
    """Section 7's claims: the best path (``top``; ``top_passed``, the fastest whose recipe also
    passed the task-level check, named when another), the bound the measured int8 ceiling sets,
    and ``cross_cosine``: how alike two images' logits are in the random network (no task check)."""
    eager, ratio = rows[0], top["ratio"]
    out = [
        f"The fastest path within one point of accuracy is **{top['variant']}**: "
        f"{ratio.verdict()} than fp32 eager PyTorch per round ({top['median_s']:.2f} s against "
        f"{eager['median_s']:.2f} s per batch of {eager['batch']}; {ceiling_share(top)}), "
        f"{top['drop_points']:+.2f} points of accuracy on the trained model.",
        f"fp32 eager runs at {ceiling_share(eager)}"
        + (
            ": at this size its time goes to arithmetic, not to per-op overhead."
            if eager.get("pct_of_ceiling", 0) >= 50
            else "."
        ),
    ]
    if top_passed["variant"] != top["variant"]:
        out.insert(
            1,
            f"Its recipe failed the INT8 rule on the trained model (section 3's table says "
            f"why); the fastest path whose recipe passed it is "
            f"**{top_passed['variant']}**, {top_passed['ratio'].verdict()} than eager.",
        )
    if ceilings.get("int8") and eager.get("gops"):
        bound = ceilings["int8"] / eager["gops"]
        out.append(
            f"The bound this CPU sets: with every operation at the measured int8 ceiling "
            f"({ceilings['int8']:.0f} GOP/s), a batch would take "
            f"{eager['median_s'] / bound:.2f} s, {bound:.1f}x eager; the fastest path that "
            f"passed reaches {top_passed['vs_eager'] / bound:.0%} of that bound."
        )
    if any(m.contended for m in runs.values()):
        out.append(
            "Other processes shared the cores during the rounds: these ratios are contended."
        )
    if any(r.get("over_ceiling") for r in rows):
        out.append(
            "A row above 100% of its ceiling means the ceiling's kernel is not the best this CPU "
            "has (a network's convolutions can beat a lone matrix product), or that load lowered "
            "the ceiling's measurement: the ceiling is a measurement too."
        )
    out.append(
        f"(The random network's logits for two different images reach a cosine of "
        f"{cross_cosine:.5f}: too alike for a task-level check.)"
    )
    return out


def target_report(
    rows: list[Mapping[str, Any]],
    runs: Mapping[str, Measurement],
    ceilings: Mapping[str, float],
    top: Mapping[str, Any],
    top_passed: Mapping[str, Any],
    want: np.ndarray,
    arch: str,
    size: int,
) -> None:
    """Section 7: the ResNet-101 table (accuracy from the trained ``arch`` at ``size`` px), its
    sentences, each variant's speedup as bars; ``want``: the random network's fp32 logits."""
    from helpers.core.comparison import max_cross_cosine

    title = "ResNet-101, 224x224, batch 16"
    label = f"accuracy (trained {model_name(arch)}, {size} px)"
    display(variants_table(rows, label, title=title))
    alike = max_cross_cosine(want)
    say(target_sentences(rows, runs, ceilings, top, top_passed, alike), markdown=True)
    rest, title = rows[1:], f"{title} on the CPU: speedup over fp32 eager PyTorch"
    plot_speedups([r["variant"] for r in rest], [r["vs_eager"] for r in rest], title=title)


def plot_speed_against_accuracy(
    runs: Mapping[str, Measurement], acc: Mapping[str, float], title: str
) -> Any:
    """Each variant's throughput against its held-out accuracy, one labelled point each."""
    points = [{"label": k, "speed": m.throughput, "accuracy": acc[k]} for k, m in runs.items()]
    return plot_speed_accuracy(points, title=f"{title}: speed vs held-out accuracy")


def embedder_table(
    checks: Mapping[str, Any], variants: Mapping[str, Any], x: np.ndarray, want: np.ndarray
) -> Table:
    """The embedder's task-level checks, with each variant's mean cosine to fp32."""
    from helpers.core.comparison import max_cross_cosine, rowwise_cosine

    rows = [
        {
            "variant": k,
            "check": check_text(c),
            "mean cosine": f"{rowwise_cosine(variants[k].call(x), want).mean():.4f}",
        }
        for k, c in checks.items()
    ]
    return Table(
        rows,
        title=f"embedder, {len(x)} held-out images: each embedding nearest its own fp32 one",
        notes=[
            f"The most similar pair of different images has cosine {max_cross_cosine(want):.4f} "
            "in fp32: a lowest cosine below it means a fixed similarity threshold set on fp32 "
            "embeddings would not carry over to INT8 ones unchanged."
        ],
    )


def ablation_report(ablation: Iterable[Mapping[str, Any]]) -> None:
    """The embedder's ablation as a table, and what it shows (per-channel vs per-tensor scales,
    calibration size)."""
    rows = list(ablation)
    display(Table(rows, formats={"mean cosine": ".4f", "nearest own": ".0%"}))
    most = max(r["calibration images"] for r in rows)
    least = min(r["calibration images"] for r in rows)

    def get(n: int, weights: str) -> Mapping[str, Any]:
        return next(r for r in rows if r["calibration images"] == n and r["weights"] == weights)

    pc, pt, one = get(most, "per-channel"), get(most, "per-tensor"), get(least, "per-channel")
    word = "closer to" if pc["mean cosine"] > pt["mean cosine"] else "further from"
    say(
        f"With {most} calibration images, per-channel weight scales keep the INT8 embeddings "
        f"{word} fp32 than per-tensor ones (mean cosine {pc['mean cosine']:.4f} against "
        f"{pt['mean cosine']:.4f}; own image nearest {pc['nearest own']:.0%} against "
        f"{pt['nearest own']:.0%}). With {least} calibration image(s) instead of {most}, "
        f"per channel: mean cosine {one['mean cosine']:.4f}, own image nearest "
        f"{one['nearest own']:.0%}.",
        markdown=True,
    )


def embedder_speed_sentences(
    timed: Mapping[int, tuple[list, dict]], alone: Measurement
) -> list[str]:
    """The embedder's batch-1 figures (alone, interleaved) and INT8's ratios to ORT fp32."""
    b1 = min(timed)
    eager = timed[b1][1]["PyTorch eager fp32"]
    ratios = _per_batch(timed, "ORT fp32", "ORT int8 (minmax)")
    return [
        f"PyTorch eager fp32 embeds {alone.throughput:.0f} images/s at batch 1 timed alone "
        f"(the figure chapters 0 and 7 record the same way) and {eager.throughput:.0f} in the "
        f"interleaved rounds at batch {b1}, where a call may follow an OpenVINO one, whose "
        "worker threads keep a core awake briefly after each call (no setting changes that).",
        f"ORT INT8 (min-max) against ORT fp32: {ratios}.",
    ]


def summary_table(
    r101_rows: list[Mapping[str, Any]],
    r101_runs: Mapping[str, Measurement],
    top: Mapping[str, Any],
    timed: Mapping[int, tuple[list, dict]],
    acc: Mapping[str, float],
    base: str,
    *,
    arch: str,
    size: int,
    emb_alone: Measurement,
) -> Table:
    """This chapter's own figures, each with what was measured; ``top``: the fastest path within a
    point of accuracy whose recipe passed the INT8 rule (a failed path is never "best")."""
    u8, r16, bn = "ORT int8 (QDQ, U8S8)", "ResNet-101, 224 px, batch 16", max(timed)
    model, alone = f"trained {model_name(arch)}, {size} px", "PyTorch eager fp32 images/s"

    def over(runs: Mapping[str, Measurement], other: str) -> str:
        return paired_ratio(runs[other], runs[u8]).verdict()

    best = f"{top['ratio'].verdict()}, {ceiling_share(top)}"
    rows = [
        (f"{r16}: ORT INT8 vs fp32 eager", ratio_of(r101_rows, u8).verdict()),
        (f"{r16}: ORT INT8 vs ORT fp32", over(r101_runs, "ORT fp32")),
        (f"{r16}: fastest path that passed ({top['variant']}) vs eager", best),
        (f"{model}: accuracy fp32 -> ORT INT8", f"{acc[base]:.1%} -> {acc[u8]:.1%}"),
        (f"{model}, batch {bn}: INT8 vs eager", ratio_of(timed[bn][0], u8).verdict()),
        (f"{model}, batch {bn}: U8S8 vs S8S8", over(timed[bn][1], "ORT int8 (QDQ, S8S8)")),
        (f"embedder, batch 1: {alone} (timed alone)", f"{emb_alone.throughput:.0f}"),
    ]
    rows = [{"measurement": m, "here": h} for m, h in rows]
    return Table(rows, title="this chapter's measurements (quick-mode figures in quick mode)")
