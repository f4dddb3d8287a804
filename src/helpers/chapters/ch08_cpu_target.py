"""The CPU deployment target: one model, every CPU runtime and precision, timed like with like.

variants = build_variants(model, "model.onnx", calibration, threads=2, work_dir="art")
rows, runs = measure_variants(variants, x16, ceilings=roofline.ceilings("cpu"), flops=f)
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import nncf
import numpy as np
import openvino as ov

from helpers.core.checks import check_int
from helpers.core.threads import WAIT_POLICY_ENV, threads_spin, torch_threads
from helpers.deploy.quantization import check_calibration
from helpers.measure.measurement import Measurement, paired_ratio
from helpers.measure.timer import benchmark_interleaved

__all__ = [
    "VARIANTS",
    "Variant",
    "torch_variants",
    "ONE_THREAD",
    "torch_one_thread",
    "ort_variant",
    "openvino_variant",
    "nncf_quantize",
    "build_variants",
    "measure_variants",
    "best_ceilings",
    "best_path",
    "quiet_progress",
    "wait_policy",
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


def torch_variants(model: Any, threads: int) -> dict[str, Variant]:
    """fp32 eager (the baseline) and bf16 autocast with channels-last, on ``threads`` threads
    (``torch.set_num_threads``, process-wide: the baseline gets every runtime's cores)."""
    import copy

    import torch

    torch.set_num_threads(check_int("threads", threads))
    fp32 = model.eval()
    cl = copy.deepcopy(model).eval().to(memory_format=torch.channels_last)

    def eager(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return fp32(torch.from_numpy(x)).numpy()

    def bf16(x: np.ndarray) -> np.ndarray:
        xt = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return cl(xt).float().numpy()

    n, (base, fast) = torch.get_num_threads(), VARIANTS[:2]
    settings = {"autocast": "bfloat16", "memory_format": "channels_last"}
    return {
        base: Variant(base, "PyTorch eager", "fp32", n, eager, framework="torch"),
        fast: Variant(fast, "PyTorch eager", "bf16", n, bf16, framework="torch", settings=settings),
    }


ONE_THREAD = "PyTorch eager fp32, 1 thread"  # chapter 7's control: no thread ever waits


def torch_one_thread(model: Any) -> Variant:
    """fp32 eager PyTorch on one thread for each call (the process keeps its own count): the
    control beside the baseline, since on one thread no worker waits (chapter 7's thread rule)."""
    import torch

    net = model.eval()

    def eager(x: np.ndarray) -> np.ndarray:
        with torch_threads(1), torch.inference_mode():
            return net(torch.from_numpy(x)).numpy()

    return Variant(ONE_THREAD, "PyTorch eager", "fp32", 1, eager, framework="torch")


def ort_variant(label: str, path: str | Path, threads: int, *, precision: str = "fp32") -> Variant:
    """An ONNX Runtime CPU session (level 'all') on ``threads`` intra-op threads and one inter-op
    thread; the threads it states are read back from the session's options."""
    from helpers.deploy import runtimes

    threads = check_int("threads", threads)
    kw = {"optimization": "all", "intra_op_threads": threads, "inter_op_threads": 1}
    runner = runtimes.create_session(path, "cpu", verbose=False, **kw)
    options = runner.handle.get_session_options()
    settings = {"optimization": "all", "inter_op_threads": options.inter_op_num_threads}
    n = options.intra_op_num_threads
    return Variant(label, "ONNX Runtime", precision, n, runner.run, settings=settings)


def openvino_variant(
    label: str,
    model: Any,
    threads: int,
    *,
    precision: str = "f32",
    streams: int = 1,
) -> Variant:
    """OpenVINO on the CPU on ``threads`` threads: ``streams=1`` the LATENCY hint, more the
    THROUGHPUT hint with each call's batch split across the streams (:func:`openvino_streams`).
    ``precision`` is the hint (for INT8, that of the layers left unquantized); the variant's
    precision is read back from what the convolutions run in."""
    from helpers.deploy import runtimes

    runner = runtimes.openvino_model(  # it refuses threads < 1
        model, precision=precision, threads=threads, streams=streams, name=label, verbose=False
    )
    call = runner.run if streams == 1 else openvino_streams(runner.handle, streams)
    settings = {k: runner.info[k] for k in ("hint", "streams")}
    settings |= {"threads": int(runner.info["threads"]), "rest_precision": precision}
    n = settings["threads"]
    return Variant(label, "OpenVINO", runner.math_mode, n, call, "cpu", "openvino", settings)


@contextmanager
def quiet_progress() -> Iterator[None]:
    """Run the block with NNCF's progress bars (``rich``'s global console: widgets in Jupyter,
    ANSI lines in a terminal) written to a discarded buffer, and PyTorch's "No CUDA runtime is
    found" warning (NNCF's import, on a CPU) held back; both restored after."""
    import rich

    console = rich.get_console()
    saved = dict(console.__dict__)
    rich.reconfigure(file=io.StringIO(), force_terminal=False, force_jupyter=False)
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
    """The variants of :data:`VARIANTS` named in ``which`` for ``model`` (exported: ``onnx_path``)
    on ``threads`` threads; ``calibration`` (never evaluation images) feeds both INT8 tools;
    ``bf16=False`` (no AVX-512 BF16 or AMX) leaves out the bf16 ones."""
    from helpers.deploy.quantization import quantize_onnx

    wanted = list(which)
    unknown = [w for w in wanted if w not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    wanted = [w for w in wanted if bf16 or "bf16" not in w]
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    if any(w.startswith("OpenVINO int8") for w in wanted):
        with quiet_progress():
            q = nncf_quantize(onnx_path, calibration)

    def ort_int8(name: str) -> Variant:
        dst = work / (Path(onnx_path).stem + ".int8.onnx")
        return ort_variant(
            name, quantize_onnx(onnx_path, dst, calibration).path, threads, precision="int8"
        )

    tv = torch_variants(model, threads)
    build: dict[str, Callable[[str], Variant]] = {
        **dict.fromkeys(tv, tv.__getitem__),
        "ORT fp32": lambda k: ort_variant(k, onnx_path, threads),
        "OpenVINO bf16": lambda k: openvino_variant(k, onnx_path, threads, precision="bf16"),
        "ORT int8 (QDQ, U8S8)": ort_int8,
        "OpenVINO int8 (NNCF)": lambda k: openvino_variant(k, q, threads),
        "OpenVINO int8 (NNCF, 2 streams)": lambda k: openvino_variant(
            k, q, threads, streams=streams
        ),
    }
    return {k: build[k](k) for k in wanted}


def measure_variants(
    variants: Mapping[str, Variant],
    x: np.ndarray,
    *,
    warmup: int = 1,
    repeats: int = 5,
    flops: float | None = None,
    ceilings: Mapping[str, float] | None = None,
    progress: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Measurement]]:
    """Time every variant on batch ``x`` in interleaved rounds: ``(rows, measurements)``; with
    ``flops`` (one call's) and ``ceilings`` each row gets the share of its own precision's."""
    baseline = VARIANTS[0]  # fp32 eager PyTorch: every row's paired ratio is over it
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
        ratio = paired_ratio(runs[baseline], m)
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
            "ratio": ratio,
            "vs_eager": ratio.median,
            "cores_used": m.cores_used,  # the cores this process kept busy in the timed calls
        }
        if flops and ceilings:
            row["gops"], ceiling = flops / m.median / 1e9, ceilings.get(v.precision)
            row["ceiling_gops"] = ceiling
            row["pct_of_ceiling"] = 100.0 * row["gops"] / ceiling if ceiling else float("nan")
        rows.append(row)
    return rows, runs


def best_ceilings(
    rows: Iterable[dict[str, Any]], *measured: Mapping[str, float]
) -> dict[str, float]:
    """The best of several ceiling measurements per mode; the rows' % of ceiling redone with it.

    A burst of load during one measurement lowers a ceiling (and inflates every % of it), so the
    higher is kept. A row still above 100% (load, or the ceiling's kernel is not this CPU's best)
    gets ``over_ceiling=True``.
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


def wait_policy() -> str:
    """How idle worker threads wait in each framework of this process, in one line."""
    policy = os.environ.get(WAIT_POLICY_ENV, "").strip().upper() or "unset (spin)"
    ort_spin = "spin" if threads_spin() else "sleep"
    return f"idle threads: PyTorch {policy}, ONNX Runtime {ort_spin}, OpenVINO TBB's own"


def best_path(
    rows: Iterable[Mapping[str, Any]], max_drop_points: float = 1.0, *, passed_only: bool = False
) -> dict:
    """The fastest non-baseline row within ``max_drop_points`` of accuracy; ``passed_only`` leaves
    out rows with ``passed=False`` (their recipe failed the task-level check)."""
    fine = [
        r
        for r in list(rows)[1:]
        if r.get("drop_points") is not None and r["drop_points"] <= max_drop_points
        if r.get("passed", True) or not passed_only
    ]
    if not fine:
        raise ValueError(f"no variant within {max_drop_points} points of accuracy")
    return dict(max(fine, key=lambda r: r["vs_eager"]))


# ---- saved from notebooks/08_int8_quantization.ipynb by tools/save_cells.py: edit it there ----
def nncf_quantize(onnx_path: str | Path, calibration: Any) -> Any:
    """NNCF post-training INT8 of an ONNX file: an OpenVINO model with FakeQuantize."""
    x = check_calibration(calibration)
    model = ov.Core().read_model(str(onnx_path))
    # NNCF collects statistics one sample at a time: a dataset of single-image batches
    dataset = nncf.Dataset([x[i : i + 1] for i in range(len(x))])
    return nncf.quantize(
        model,
        dataset,
        subset_size=len(x),  # every calibration image (NNCF's default takes 300)
        # symmetric int8 weights and activations (MIXED: asymmetric activations)
        preset=nncf.QuantizationPreset.PERFORMANCE,
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
        # start_async returns at once; a stream computes
        for i, part in enumerate(parts):
            queue.start_async({0: part}, userdata=i)
        queue.wait_all()
        return np.concatenate([results[i] for i in range(len(parts))])

    return call


# ---- end of cells saved from notebooks/08_int8_quantization.ipynb ----
