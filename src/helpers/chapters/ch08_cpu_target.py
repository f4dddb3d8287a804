"""The CPU deployment target: one model, every CPU runtime and precision, timed like with like.

    variants = build_variants(model, "model.onnx", calibration, threads=2, work_dir="art")
    table = measure_variants(variants, x16, ceilings=roofline.ceilings("cpu"), flops=f)

Every :class:`Variant` names its runtime, device, precision (``fp32``, ``bf16``, ``int8``: the
precision policy's modes) and the threads it was given; every runtime gets the same threads, set
explicitly. The OpenVINO streams runner (``PERFORMANCE_HINT=THROUGHPUT``: the batch split across
streams of one thread each) and NNCF's quantization (:func:`nncf_quantize`) are written on chapter
8's page and saved here; :func:`quiet_progress` keeps NNCF's progress bars off the page, and
:func:`task_row` / :func:`format_rows` turn the page's checks and timings into table rows.
"""

from __future__ import annotations

import io
import logging
import os
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov

from helpers.core.threads import WAIT_POLICY_ENV, threads_spin
from helpers.deploy.quantization import check_calibration
from helpers.measure.measurement import Measurement, paired_ratio
from helpers.measure.timer import benchmark_interleaved
from helpers.show.table import Table

__all__ = [
    "VARIANTS",
    "Variant",
    "torch_variants",
    "ort_variant",
    "openvino_variant",
    "nncf_quantize",
    "build_variants",
    "measure_variants",
    "format_rows",
    "best_ceilings",
    "quiet_progress",
    "wait_policy",
    "say",
    "model_name",
    "training_table",
    "preprocess_sentence",
    "checks_table",
    "small_model_table",
    "small_model_sentences",
    "best_path",
    "target_sentences",
    "embedder_table",
    "ablation_sentence",
    "embedder_speed_sentences",
    "summary_table",
    "slug",
    "openvino_streams",
]

nncf.set_log_level(logging.WARNING)  # NNCF's INFO lines would flood the page

# The variants build_variants knows, in the order they are shown (baseline first).
VARIANTS: tuple[str, ...] = (
    "PyTorch eager fp32",
    "PyTorch bf16 autocast + channels-last",
    "ORT fp32",
    "OpenVINO bf16",
    "ORT int8 (QDQ, U8S8)",
    "OpenVINO int8 (NNCF)",
    "OpenVINO int8 (NNCF, 2 streams)",
)


@dataclass
class Variant:
    """One way to run the model: ``call(x) -> logits`` on NumPy, and what a table must say about it."""

    label: str
    runtime: str
    precision: str  # the precision policy's mode of its heavy layers: fp32, bf16, int8
    threads: int
    call: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    device: str = "cpu"
    framework: str = "onnxruntime"  # the name helpers.measure.timer knows
    settings: dict[str, Any] = field(default_factory=dict)


def _check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    return threads


def torch_variants(model: Any, threads: int) -> dict[str, Variant]:
    """fp32 eager (the baseline) and bf16 autocast with channels-last, both on ``threads`` threads.

    ``torch.set_num_threads(threads)`` is set here (a process-wide setting): the baseline gets
    the same cores as every runtime.
    """
    import copy

    import torch

    torch.set_num_threads(_check_threads(threads))
    fp32 = model.eval()
    cl = copy.deepcopy(model).eval().to(memory_format=torch.channels_last)

    def eager(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return fp32(torch.from_numpy(x)).numpy()

    def bf16(x: np.ndarray) -> np.ndarray:
        xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return cl(xt).float().numpy()

    n = torch.get_num_threads()
    return {
        "PyTorch eager fp32": Variant(
            "PyTorch eager fp32", "PyTorch eager", "fp32", n, eager, framework="torch"
        ),
        "PyTorch bf16 autocast + channels-last": Variant(
            "PyTorch bf16 autocast + channels-last",
            "PyTorch eager",
            "bf16",
            n,
            bf16,
            framework="torch",
            settings={"autocast": "bfloat16", "memory_format": "channels_last"},
        ),
    }


def ort_variant(
    label: str,
    path: str | Path,
    threads: int,
    *,
    precision: str = "fp32",
    optimization: str = "all",
) -> Variant:
    """An ONNX Runtime CPU session on ``threads`` intra-op threads (one inter-op thread).

    The threads it states are read back from the session's options, not from the request.
    """
    from helpers.deploy import runtimes

    runner = runtimes.create_session(
        path,
        "cpu",
        optimization=optimization,
        intra_op_threads=_check_threads(threads),
        inter_op_threads=1,
        verbose=False,
    )
    options = runner.handle.get_session_options()
    return Variant(
        label,
        "ONNX Runtime",
        precision,
        options.intra_op_num_threads,
        runner.run,
        settings={"optimization": optimization, "inter_op_threads": options.inter_op_num_threads},
    )


def openvino_variant(
    label: str,
    model: Any,
    threads: int,
    *,
    precision: str = "f32",
    streams: int = 1,
) -> Variant:
    """OpenVINO on the CPU with ``threads`` threads in all and an explicit precision hint.

    ``streams=1``: ``PERFORMANCE_HINT=LATENCY``, one request uses every thread. ``streams > 1``:
    ``THROUGHPUT`` with ``NUM_STREAMS=streams``; the threads are shared among the streams and
    each call splits its batch across them (:func:`openvino_streams`). For an INT8 model the hint
    is the precision of the layers left unquantized. The label's precision is read back from the
    compiled model (what its convolutions really run in).
    """
    import openvino as ov

    from helpers.deploy import runtimes

    _check_threads(threads)
    if isinstance(streams, bool) or not isinstance(streams, int) or not 1 <= streams <= threads:
        raise ValueError(f"streams must be an int from 1 to threads ({threads}), got {streams!r}")
    if precision not in runtimes.OV_PRECISIONS:
        raise ValueError(f"precision must be one of {runtimes.OV_PRECISIONS}, got {precision!r}")
    core = ov.Core()
    if isinstance(model, (str, Path)):
        model = core.read_model(str(model))
    config: dict[str, Any] = {
        "INFERENCE_PRECISION_HINT": precision,
        "INFERENCE_NUM_THREADS": threads,
        "PERFORMANCE_HINT": "LATENCY" if streams == 1 else "THROUGHPUT",
    }
    if streams > 1:
        config["NUM_STREAMS"] = streams
    compiled = core.compile_model(model, "CPU", config)
    precisions = runtimes.runtime_precisions(compiled)
    heavy = {
        p for (layer, p), _ in precisions.items() if layer in ("Convolution", "FullyConnected")
    }
    mode = (
        "int8"
        if heavy & {"i8", "u8"}
        else {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}[precision]
    )
    if streams == 1:
        request = compiled.create_infer_request()

        def call(x: np.ndarray) -> np.ndarray:
            request.infer({0: np.ascontiguousarray(x, dtype=np.float32)})
            return request.get_output_tensor(0).data.copy()

    else:
        call = openvino_streams(compiled, streams)
    settings = {
        "hint": config["PERFORMANCE_HINT"],
        "streams": int(compiled.get_property("NUM_STREAMS")),
        "threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
        "rest_precision": precision,
    }
    return Variant(
        label, "OpenVINO", mode, settings["threads"], call, framework="openvino", settings=settings
    )


@contextmanager
def quiet_progress() -> Iterator[None]:
    """Run the block with ``rich``'s progress bars (NNCF's) written nowhere, then restore them.

    NNCF draws its bars through rich's global console: in Jupyter as widgets (``clear_output``
    messages in a saved notebook), in a terminal as ANSI lines. The console is swapped for one
    that writes to a discarded buffer, neither terminal nor Jupyter, for the block only; PyTorch's
    "No CUDA runtime is found" warning, which NNCF's import triggers on a CPU, is held back too.
    """
    import rich

    console = rich.get_console()
    saved = dict(console.__dict__)
    rich.reconfigure(file=io.StringIO(), force_terminal=False, force_jupyter=False)
    # NNCF imports PyTorch's C++-extension module, which warns on a CPU-only machine that it found
    # no CUDA runtime: true, and no concern of an OpenVINO quantization
    cpp_ext = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_ext.level
    cpp_ext.setLevel(logging.ERROR)
    try:
        yield
    finally:
        console.__dict__ = saved
        cpp_ext.setLevel(level)


def build_variants(
    model: Any,
    onnx_path: str | Path,
    calibration: np.ndarray,
    *,
    threads: int,
    work_dir: str | Path,
    which: Iterable[str] = VARIANTS,
    bf16: bool = True,
    streams: int = 2,
) -> dict[str, Variant]:
    """Every variant of :data:`VARIANTS` named in ``which``, for one model, all on ``threads`` threads.

    ``onnx_path`` is ``model`` exported (chapter 7's ``export_and_verify``); ``calibration`` feeds
    both INT8 tools (never the evaluation images). ``bf16=False`` leaves out the bf16 variants
    (a CPU without AVX-512 BF16 or AMX).
    """
    from helpers.deploy.quantization import quantize_onnx

    wanted = list(which)
    unknown = [w for w in wanted if w not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    if not bf16:
        wanted = [w for w in wanted if "bf16" not in w]
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Variant] = {}
    tv = torch_variants(model, threads)
    for name in wanted:
        if name in tv:
            out[name] = tv[name]
        elif name == "ORT fp32":
            out[name] = ort_variant(name, onnx_path, threads)
        elif name == "OpenVINO bf16":
            out[name] = openvino_variant(name, onnx_path, threads, precision="bf16")
        elif name == "ORT int8 (QDQ, U8S8)":
            rep = quantize_onnx(
                onnx_path, work / (Path(onnx_path).stem + ".int8.onnx"), calibration
            )
            out[name] = ort_variant(name, rep.path, threads, precision="int8")
    nncf_names = [w for w in wanted if w.startswith("OpenVINO int8")]
    if nncf_names:
        with quiet_progress():
            q = nncf_quantize(onnx_path, calibration)
        for name in nncf_names:
            n = streams if "streams" in name else 1
            out[name] = openvino_variant(name, q, threads, precision="f32", streams=n)
    return {k: out[k] for k in wanted if k in out}


def measure_variants(
    variants: Mapping[str, Variant],
    x: np.ndarray,
    *,
    warmup: int = 1,
    repeats: int = 5,
    flops: float | None = None,
    ceilings: Mapping[str, float] | None = None,
    baseline: str = "PyTorch eager fp32",
    progress: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Measurement]]:
    """Time every variant on batch ``x`` in interleaved rounds; one table row per variant.

    Each row: runtime, device, precision, threads, median seconds and its interquartile range,
    speedup over ``baseline`` (the median of the per-round ratios,
    :func:`helpers.measure.measurement.paired_ratio`), and with ``flops`` (one call's operations)
    and ``ceilings`` (:func:`helpers.measure.roofline.ceilings`) the share of the ceiling *of the
    variant's own precision* it reaches.
    """
    if baseline not in variants:
        raise ValueError(f"the baseline {baseline!r} is not among the variants")
    fns = {k: partial(v.call, x) for k, v in variants.items()}
    fws = {k: v.framework for k, v in variants.items()}
    runs = benchmark_interleaved(
        fns, framework=fws, warmup=warmup, repeats=repeats, items=len(x), progress=progress
    )
    rows = []
    for k, v in variants.items():
        m = runs[k]
        row: dict[str, Any] = {
            "variant": k,
            "runtime": v.runtime,
            "device": v.device,
            "precision": v.precision,
            "threads": v.threads,
            "batch": len(x),
            "median_s": m.median,
            "p25_s": m.p25,
            "p75_s": m.p75,
            "vs_eager": paired_ratio(runs[baseline], m).median,
        }
        cpu_s, wall_s = getattr(m, "cpu_s", None), getattr(m, "wall_s", None)
        if cpu_s and wall_s:  # the cores this process really kept busy during the timed calls
            row["cores_used"] = cpu_s / wall_s
        if flops and ceilings:
            ceiling = ceilings.get(v.precision)
            achieved = flops / m.median / 1e9
            row["gops"] = achieved
            row["ceiling_gops"] = ceiling
            row["pct_of_ceiling"] = 100.0 * achieved / ceiling if ceiling else float("nan")
        rows.append(row)
    return rows, runs


def best_ceilings(
    rows: Iterable[dict[str, Any]], *measured: Mapping[str, float]
) -> dict[str, float]:
    """The best of several ceiling measurements per mode; the rows' % of ceiling redone with it.

    A ceiling is a best case, and a burst of load during one measurement lowers it (and inflates
    every percentage of it): measure before and after the rounds and keep the higher. A row that
    still exceeds 100% means the ceiling was measured under load (or its kernel is not the best
    this CPU has): the row gets ``over_ceiling=True``.
    """
    best: dict[str, float] = {}
    for peaks in measured:
        for mode, value in peaks.items():
            best[mode] = max(best.get(mode, 0.0), float(value))
    for r in rows:
        ceiling = best.get(r["precision"])
        if "gops" in r and ceiling:
            r["ceiling_gops"] = ceiling
            r["pct_of_ceiling"] = 100.0 * r["gops"] / ceiling
            r["over_ceiling"] = r["pct_of_ceiling"] > 100.0
    return best


def format_rows(
    rows: Iterable[Mapping[str, Any]], accuracy_label: str = "accuracy"
) -> list[dict[str, str]]:
    """The rows of :func:`measure_variants` as text, one dict per variant (a table's rows).

    Columns: variant, precision, threads, seconds per batch with its interquartile range, ratio to
    the baseline, cores really used, and the share of the ceiling of the variant's own precision.
    A row with ``accuracy`` (and ``drop_points``) set adds them, the accuracy column named
    ``accuracy_label`` (say which model it was measured on when it is not the timed one).
    """
    out = []
    for r in rows:
        row = {
            "variant": r["variant"],
            "precision": r["precision"],
            "threads": str(r["threads"]),
            "s / batch (IQR)": f"{r['median_s']:.3f} ({r['p25_s']:.3f}-{r['p75_s']:.3f})",
            "vs eager": f"{r['vs_eager']:.2f}x",
        }
        if r.get("cores_used") is not None:
            row["cores used"] = f"{r['cores_used']:.2f}"
        if "pct_of_ceiling" in r:
            row["% of own ceiling"] = (
                f"{r['pct_of_ceiling']:.0f}% of {r['ceiling_gops']:.0f}"
                if r["ceiling_gops"]
                else "no ceiling"
            )
        if r.get("accuracy") is not None:
            row[accuracy_label] = f"{100 * r['accuracy']:.2f}%"
            row["drop (points)"] = f"{r['drop_points']:+.2f}"
        out.append(row)
    return out


def task_row(check: Any, accuracy: float | None = None, reference: float | None = None) -> dict:
    """One table row of a :class:`helpers.core.comparison.TaskCheck` (and held-out accuracy).

    Shows what was required (each row nearest its own reference; decided rows kept), what was
    only counted (top-1 agreement overall) and the two controls that had to fail.
    """
    row: dict[str, Any] = {
        "variant": check.name,
        "mode": check.mode,
        "nearest own": f"{check.nearest_own:.0%}",
        "lowest cosine": f"{check.min_cosine:.4f}",
    }
    if check.decided is not None:
        row["decided rows kept"] = f"{check.kept}/{check.decided}"
        row["top-1 agreement"] = f"{check.top1:.1%}"
    row["controls (negated / shifted)"] = " / ".join(f"{v:.0%}" for v in check.controls.values())
    if accuracy is not None:
        row["accuracy"] = f"{accuracy:.2%}"
        if reference is not None:
            row["drop (points)"] = f"{100 * (reference - accuracy):+.2f}"
    return row


# ---- chapter 8's bookkeeping: tables, generated sentences and ledger records ----
def wait_policy() -> str:
    """How idle worker threads wait in each framework of this process, in one line."""
    policy = os.environ.get(WAIT_POLICY_ENV, "").strip().upper() or "unset (spin)"
    ort_spin = "spin" if threads_spin() else "sleep"
    return f"idle threads: PyTorch {policy}, ONNX Runtime {ort_spin}, OpenVINO TBB's own"


def say(text: str | Iterable[str]) -> None:
    """Show a generated sentence (or several, joined) as Markdown, or print it outside Jupyter."""
    body = text if isinstance(text, str) else " ".join(t for t in text if t)
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(body))
            return
    except ImportError:  # pragma: no cover - IPython is installed with Jupyter
        pass
    print(textwrap.fill(body, 88))


def model_name(arch: str) -> str:
    """``'resnet18'`` -> ``'ResNet-18'``; other names unchanged."""
    return f"ResNet-{arch[6:]}" if arch.startswith("resnet") and arch[6:].isdigit() else arch


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
    return Table(
        [row],
        formats={
            "seconds": ".0f",
            "held-out accuracy": ".1%",
            "untrained (control)": ".1%",
            "needed": ".1%",
        },
    )


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
            "(it does for a model in eval mode), so pre-processing had nothing to fold here; "
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
    rows = []
    if fp32 is not None:
        rows.append(
            {
                "variant": "ORT fp32",
                "check": f"float32 bound, {fp32.used:.2g} of it used",
                "accuracy": f"{acc.get('ORT fp32', acc[base]):.2%}",
                "drop (points)": "",
            }
        )
    for name in names if names is not None else checks:
        if isinstance(checks[name], BaseException):  # a variant that failed the check
            reason = str(checks[name]).split("check: ", 1)[-1]
            rows.append(
                {
                    "variant": name,
                    "check": f"FAILS: {reason}",
                    "accuracy": f"{acc[name]:.2%}",
                    "drop (points)": f"{100 * (acc[base] - acc[name]):+.2f}",
                }
            )
            continue
        r = task_row(checks[name], acc[name], acc[base])
        check = (
            f"passes ({r['mode']}): nearest own {r['nearest own']}, decided rows kept "
            f"{r.get('decided rows kept', '-')}, top-1 agreement {r.get('top-1 agreement', '-')}; "
            f"controls (negated / shifted) {r['controls (negated / shifted)']} nearest own"
        )
        rows.append(
            {
                "variant": name,
                "check": check,
                "accuracy": r["accuracy"],
                "drop (points)": r["drop (points)"],
            }
        )
    if planted is not None:
        err, bug_acc = planted
        reason = str(err).split(": ", 1)[-1].split(";")[0]
        rows.append(
            {
                "variant": "planted bug: calibrated on un-normalised images",
                "check": f"FAILS, as it must ({reason})",
                "accuracy": f"{bug_acc:.2%}",
                "drop (points)": f"{100 * (acc[base] - bug_acc):+.2f}",
            }
        )
    notes = []
    if any(r["check"].startswith("FAILS:") for r in rows if not r["variant"].startswith("planted")):
        notes.append(
            "A variant that FAILS kept accuracy within the asserted bound, but its logits moved "
            "further than the distance between different images' logits: its decisions may be "
            "right, its scores are not the fp32 model's. Section 7 names the fastest path whose "
            "recipe passes beside the fastest one."
        )
    return Table(rows, title=f"held-out checks against {base} ({acc[base]:.2%})", notes=notes)


def small_model_table(timed: Mapping[int, tuple[list, dict]], title: str) -> Table:
    """Throughput per variant at each batch size of ``timed`` ({batch: measure_variants(...)})."""
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
        last = timed[batches[-1]][1][name]
        row["cores used"] = None if last.cores_used is None else round(last.cores_used, 2)
        rows.append(row)
    threads = {r["threads"] for r in first_rows}
    contended = any(m.contended for _, runs in timed.values() for m in runs.values())
    return Table(
        rows,
        floatfmt=".0f",
        formats={"cores used": ".2f"},
        title=f"{title}, {'/'.join(map(str, sorted(threads)))} threads, interleaved rounds"
        + (" (CONTENDED: other processes shared the cores)" if contended else ""),
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
    per_batch = ", ".join(
        f"{paired_ratio(timed[b][1]['ORT fp32'], timed[b][1][u8]).verdict()} at batch {b}"
        for b in sorted(timed)
    )
    out.append(f"ORT INT8 (U8S8) against ORT fp32: {per_batch}.")
    out.append(
        f"Against fp32 eager PyTorch at batch {bn}: "
        f"{paired_ratio(runs_n[base], runs_n[u8]).verdict()}."
    )
    fixed_i, share_i = _fixed_share(timed, u8)
    _, share_f = _fixed_share(timed, "ORT fp32")
    _, share_e = _fixed_share(timed, base)
    out.append(
        f"Of a batch-{bn} call, costs that do not grow with the batch (dispatch, quantizing the "
        f"input, Python) take {share_i:.0%} in ORT INT8 ({1e3 * fixed_i:.2f} ms), {share_f:.0%} "
        f"in ORT fp32 and {share_e:.0%} in eager PyTorch; the rest is arithmetic, the part "
        "INT8 speeds up."
    )
    return out


def best_path(
    rows: Iterable[Mapping[str, Any]], max_drop_points: float = 1.0, *, passed_only: bool = False
) -> dict:
    """The fastest non-baseline row within ``max_drop_points`` of accuracy.

    ``passed_only`` leaves out rows with ``passed=False`` (their recipe failed the task-level
    check on the trained model); a row without ``passed`` counts as passed.
    """
    rows = list(rows)
    fine = [r for r in rows[1:] if r.get("drop_points") is not None]
    fine = [r for r in fine if r["drop_points"] <= max_drop_points]
    if passed_only:
        fine = [r for r in fine if r.get("passed", True)]
    if not fine:
        raise ValueError(f"no variant within {max_drop_points} points of accuracy")
    return dict(max(fine, key=lambda r: r["vs_eager"]))


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
    top_passed: Mapping[str, Any] | None = None,
) -> list[str]:
    """Section 7's claims: the best path, and the bound the measured int8 ceiling sets.

    ``top`` is the fastest row within the accuracy bound (:func:`best_path`), ``top_passed`` the
    fastest whose recipe also passed the task-level check (named when it is another row).
    """
    eager = rows[0]
    ratio = paired_ratio(runs[eager["variant"]], runs[top["variant"]])  # top's vs_eager
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
    if top_passed is not None and top_passed["variant"] != top["variant"]:
        ratio = paired_ratio(runs[eager["variant"]], runs[top_passed["variant"]])
        out.insert(
            1,
            f"Its recipe failed the task-level check on the trained model (its logits moved more "
            f"than the distance between images'); the fastest path whose recipe passed it is "
            f"**{top_passed['variant']}**, {ratio.verdict()} than eager.",
        )
    if ceilings.get("int8") and eager.get("gops"):
        bound = ceilings["int8"] / eager["gops"]
        out.append(
            f"The bound this CPU sets: with every operation at the measured int8 ceiling "
            f"({ceilings['int8']:.0f} GOP/s), a batch would take "
            f"{eager['median_s'] / bound:.2f} s, {bound:.1f}x eager; the best path reaches "
            f"{top['vs_eager'] / bound:.0%} of that bound."
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
    return out


def embedder_table(
    checks: Mapping[str, Any], variants: Mapping[str, Variant], x: np.ndarray, want: np.ndarray
) -> Table:
    """The embedder's task-level checks, with each variant's mean cosine to fp32."""
    from helpers.core.comparison import max_cross_cosine, rowwise_cosine

    rows = []
    for name, check in checks.items():
        mean = f"{rowwise_cosine(variants[name].call(x), want).mean():.4f}"
        if isinstance(check, BaseException):
            reason = str(check).split("check: ", 1)[-1]
            row = {"variant": name, "mode": variants[name].precision, "nearest own": "FAILS"}
            row.update({"lowest cosine": reason, "controls (negated / shifted)": "-"})
        else:
            row = task_row(check)
        row["mean cosine"] = mean
        rows.append(row)
    return Table(
        rows,
        title=f"embedder, {len(x)} held-out images: each embedding nearest its own fp32 one",
        notes=[
            f"The most similar pair of different images has cosine {max_cross_cosine(want):.4f} "
            "in fp32: a lowest cosine below it means a fixed similarity threshold set on fp32 "
            "embeddings would not carry over to INT8 ones unchanged."
        ],
    )


def ablation_sentence(ablation: Iterable[Mapping[str, Any]]) -> str:
    """What the embedder's ablation shows: per-channel vs per-tensor, and calibration size."""
    rows = list(ablation)
    most = max(r["calibration images"] for r in rows)
    least = min(r["calibration images"] for r in rows)

    def get(n: int, weights: str) -> Mapping[str, Any]:
        return next(r for r in rows if r["calibration images"] == n and r["weights"] == weights)

    pc, pt = get(most, "per-channel"), get(most, "per-tensor")
    one = get(least, "per-channel")
    gap = pc["mean cosine"] - pt["mean cosine"]
    word = "closer to" if gap > 0 else "further from"
    return (
        f"With {most} calibration images, per-channel weight scales keep the INT8 embeddings "
        f"{word} fp32 than per-tensor ones (mean cosine {pc['mean cosine']:.4f} against "
        f"{pt['mean cosine']:.4f}; own image nearest {pc['nearest own']:.0%} against "
        f"{pt['nearest own']:.0%}). With {least} calibration image(s) instead of {most}, "
        f"per channel: mean cosine {one['mean cosine']:.4f}, own image nearest "
        f"{one['nearest own']:.0%}."
    )


def embedder_speed_sentences(
    timed: Mapping[int, tuple[list, dict]], alone: Measurement
) -> list[str]:
    """The embedder's batch-1 figures (alone, interleaved) and INT8's ratios to ORT fp32."""
    b1 = min(timed)
    runs1 = timed[b1][1]
    eager = runs1["PyTorch eager fp32"]
    ratios = ", ".join(
        f"{paired_ratio(timed[b][1]['ORT fp32'], timed[b][1]['ORT int8 (minmax)']).verdict()} "
        f"at batch {b}"
        for b in sorted(timed)
    )
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
    """This chapter's own figures, each with what was measured (for the page's last table)."""
    u8 = r101_u8 = "ORT int8 (QDQ, U8S8)"
    bn = max(timed)
    runs_n = timed[bn][1]
    eager = r101_runs[base]

    def v(r: Any) -> str:
        return r.verdict()

    rows = [
        {
            "measurement": "ResNet-101, 224 px, batch 16: ORT INT8 vs fp32 eager",
            "here": v(paired_ratio(eager, r101_runs[r101_u8])),
        },
        {
            "measurement": "ResNet-101, 224 px, batch 16: ORT INT8 vs ORT fp32",
            "here": v(paired_ratio(r101_runs["ORT fp32"], r101_runs[r101_u8])),
        },
        {
            "measurement": f"ResNet-101, 224 px, batch 16: best path ({top['variant']}) vs eager",
            "here": f"{v(paired_ratio(eager, r101_runs[top['variant']]))}, {ceiling_share(top)}",
        },
        {
            "measurement": f"trained {model_name(arch)}, {size} px: accuracy fp32 -> ORT INT8",
            "here": f"{acc[base]:.1%} -> {acc[u8]:.1%}",
        },
        {
            "measurement": f"trained {model_name(arch)}, {size} px, batch {bn}: INT8 vs eager",
            "here": v(paired_ratio(runs_n[base], runs_n[u8])),
        },
        {
            "measurement": f"trained {model_name(arch)}, {size} px, batch {bn}: U8S8 vs S8S8",
            "here": v(paired_ratio(runs_n["ORT int8 (QDQ, S8S8)"], runs_n[u8])),
        },
        {
            "measurement": "embedder, batch 1: PyTorch eager fp32 images/s (timed alone)",
            "here": f"{emb_alone.throughput:.0f}",
        },
    ]
    return Table(rows, title="this chapter's measurements (quick-mode figures in quick mode)")


def slug(text: str) -> str:
    """A variant's label as a record-name segment: ``'ORT int8 (QDQ, U8S8)'`` -> ``'ort_int8_qdq_u8s8'``."""
    return "_".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


# ---- saved from notebooks/08_int8_quantization.ipynb by tools/save_cells.py: edit it there ----
def nncf_quantize(onnx_path: str | Path, calibration: Any, *, mixed: bool = False) -> Any:
    """NNCF post-training INT8 of an ONNX file: an OpenVINO model with FakeQuantize."""
    x = check_calibration(calibration)
    model = ov.Core().read_model(str(onnx_path))
    # NNCF collects statistics one sample at a time: a dataset of single-image batches
    dataset = nncf.Dataset([x[i : i + 1] for i in range(len(x))])
    return nncf.quantize(
        model,
        dataset,
        subset_size=len(x),  # every calibration image (NNCF's default takes 300)
        # PERFORMANCE: symmetric int8 weights and activations; MIXED: asymmetric ones
        preset=nncf.QuantizationPreset("mixed" if mixed else "performance"),
        fast_bias_correction=True,  # each layer's bias shifted back by its mean error
    )


def openvino_streams(compiled: Any, streams: int) -> Callable[[np.ndarray], np.ndarray]:
    """``call(x)`` splitting a batch across ``streams`` infer requests at once."""
    queue = ov.AsyncInferQueue(compiled, streams)  # one request per stream
    results: dict[int, np.ndarray] = {}

    def collect(request: Any, part: int) -> None:  # runs when a request finishes
        results[part] = request.get_output_tensor(0).data.copy()

    queue.set_callback(collect)

    def call(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        parts = np.array_split(x, min(streams, len(x)))
        results.clear()
        for i, part in enumerate(parts):  # start_async returns at once; a stream computes
            queue.start_async({0: part}, userdata=i)
        queue.wait_all()
        return np.concatenate([results[i] for i in range(len(parts))])

    return call


# ---- end of cells saved from notebooks/08_int8_quantization.ipynb ----
