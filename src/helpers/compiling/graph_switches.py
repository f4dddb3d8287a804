"""Compile-time optimisations (chapter 6): OneFlow ``nn.Graph`` switches and their PyTorch equivalents.

OneFlow (case study 1's switches, all on an inference ``nn.Graph``):

- ``amp`` -- ``config.enable_amp(True)``: mixed precision (fp16 on CUDA; CPU ops are not cast);
- ``conv_search`` -- ``config.enable_cudnn_conv_heuristic_search_algo(False)``: pick cuDNN
  convolution algorithms by trial runs instead of a lookup table (no cuDNN on a CPU);
- pad+conv fusion -- the MLIR pass behind :data:`~helpers.core.subprocess_run.PAD_CONV_FUSION_ENV`
  (a fresh process, see :func:`oneflow_graph_ablation`);
- ``add_fusion`` -- ``config.allow_fuse_add_to_output(True)``: the residual ``add`` is written by the
  convolution that produces one of its inputs;
- BN folding -- the MLIR inference optimisation, :data:`~helpers.core.subprocess_run.BN_FOLDING_ENV`.

PyTorch: :func:`fold_conv_bn` (``torch.fx``), :func:`to_channels_last`, :func:`autocast_fn`
(bf16 on CPU, fp16 on CUDA); ``torch.backends.cudnn.benchmark`` and ``torch.compile`` are used
directly in the notebook.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from helpers.workload.models import framework_of, nn_namespace

GRAPH_SWITCHES: tuple[str, ...] = ("amp", "conv_search", "add_fusion")


def _check_eval(model: Any) -> None:
    if not hasattr(model, "training"):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError(
            "inference optimisations need the model in eval mode: call model.eval() first "
            "(BatchNorm folding is only valid with fixed running statistics)"
        )


# --------------------------------------------------------------------------------------- OneFlow
def build_inference_graph(
    model: Any, *, amp: bool = False, conv_search: bool = False, add_fusion: bool = False
) -> Any:
    """A forward-only OneFlow ``nn.Graph`` around ``model`` with the chosen switches on."""
    if framework_of(model) != "oneflow":
        raise TypeError("build_inference_graph needs a OneFlow module")
    _check_eval(model)
    flow, nn, _ = nn_namespace("oneflow")

    class InferenceGraph(nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            if amp:
                self.config.enable_amp(True)
            if conv_search:
                self.config.enable_cudnn_conv_heuristic_search_algo(False)
            if add_fusion:
                self.config.allow_fuse_add_to_output(True)

        def build(self, x: Any) -> Any:
            return self.model(x)

    from helpers.core.environment import quiet_native_stderr

    with (
        quiet_native_stderr()
    ):  # the first nn.Graph of a process prints a harmless "no CUDA driver" line on CPU
        return InferenceGraph()


def explicit_padding(model: Any) -> Any:
    """A copy of ``model`` where every zero-padded convolution becomes ``ZeroPad2d`` + an unpadded conv.

    Same weights, same outputs -- the layout of models ported from TensorFlow's ``"SAME"``
    padding, which gives OneFlow's pad+conv fusion pass something to fuse. Works for PyTorch
    and OneFlow modules.
    """
    _, nn, _ = nn_namespace(framework_of(model))
    out = copy.deepcopy(model)

    def rewrite(module: Any) -> int:
        n = 0
        for name, child in list(module.named_children()):
            pad = getattr(child, "padding", None)
            if (
                isinstance(child, nn.Conv2d)
                and getattr(child, "padding_mode", "zeros") == "zeros"
                and not isinstance(pad, str)
                and tuple(np.broadcast_to(pad, 2)) != (0, 0)
            ):
                ph, pw = (int(v) for v in np.broadcast_to(pad, 2))
                child.padding = (0, 0)
                setattr(module, name, nn.Sequential(nn.ZeroPad2d((pw, pw, ph, ph)), child))
                n += 1
            else:
                n += rewrite(child)
        return n

    if rewrite(out) == 0:
        raise ValueError("the model has no zero-padded Conv2d to rewrite")
    return out


def _variant_switches(variant: dict[str, Any]) -> dict[str, bool]:
    if (
        not isinstance(variant, dict)
        or not isinstance(variant.get("name"), str)
        or not variant["name"]
    ):
        raise ValueError(f"each variant needs a non-empty 'name', got {variant!r}")
    unknown = set(variant) - {"name", *GRAPH_SWITCHES}
    if unknown:
        raise ValueError(
            f"variant {variant['name']!r} has unknown switches {sorted(unknown)}; "
            f"use {', '.join(GRAPH_SWITCHES)}"
        )
    return {k: bool(variant.get(k, False)) for k in GRAPH_SWITCHES}


def oneflow_graph_ablation(
    *,
    arch: str,
    num_classes: int,
    weights_path: str,
    input_path: str,
    variants: Sequence[dict[str, Any]],
    out_dir: str,
    warmup: int = 2,
    repeats: int = 5,
    explicit_pad: bool = True,
) -> dict[str, Any]:
    """Build, compile, check and time OneFlow inference graphs, one per variant (a subprocess target).

    ``weights_path`` is an ``.npz`` of a PyTorch ResNet state dict, ``input_path`` an ``.npy`` batch.
    Each variant is ``{"name": ..., "amp": bool, "conv_search": bool, "add_fusion": bool}``; the
    MLIR passes are whatever this process's environment enabled. Returns per variant: compile
    seconds (first call), timings (all variants timed round-robin), op counts, and the path of
    its saved output (``out_dir/<name>.npy``) for the caller's accuracy check.
    """
    import os

    from helpers.compiling.graph_ops import oneflow_op_counts
    from helpers.core.benchmarking import benchmark_interleaved
    from helpers.core.environment import flow_device, import_oneflow
    from helpers.workload.models import build_resnet, load_numpy_state

    switches = {
        v["name"] if isinstance(v, dict) else str(v): _variant_switches(v) for v in variants
    }
    if not switches:
        raise ValueError("no variants given")
    if len(switches) != len(variants):
        raise ValueError("variant names must be unique")
    t0 = time.perf_counter()
    flow = import_oneflow()
    import_s = time.perf_counter() - t0
    device = flow_device("auto")
    model = build_resnet("oneflow", arch, num_classes=num_classes)
    with np.load(weights_path) as npz:
        load_numpy_state(model, dict(npz))
    model = model.eval()
    if explicit_pad:
        model = explicit_padding(model)
    model = model.to(device)
    x = flow.tensor(np.load(input_path)).to(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    graphs, rows = {}, {}
    for name, sw in switches.items():
        g = build_inference_graph(model, **sw)
        start = time.perf_counter()
        y = g(x).numpy()
        compile_s = time.perf_counter() - start
        np.save(out / f"{name}.npy", y.astype(np.float32))
        graphs[name] = g
        rows[name] = {
            "switches": sw,
            "compile_s": compile_s,
            "output": str(out / f"{name}.npy"),
            "op_counts": oneflow_op_counts(g),
        }
    times = benchmark_interleaved(
        {n: (lambda g=g: g(x).numpy()) for n, g in graphs.items()},
        framework="oneflow",
        warmup=warmup,
        repeats=repeats,
        items=int(x.shape[0]),
    )
    for name, m in times.items():
        rows[name].update(
            mean_s=m.mean, median_s=m.median, std_s=m.std, times_s=m.times_s, items=m.items
        )
    mlir = {
        k: os.environ[k]
        for k in (
            "ONEFLOW_MLIR_ENABLE_ROUND_TRIP",
            "ONEFLOW_MLIR_FUSE_FORWARD_OPS",
            "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION",
        )
        if k in os.environ
    }
    return {"device": str(device), "oneflow_import_s": import_s, "mlir_env": mlir, "variants": rows}


# ------------------------------------------------------------------------------- accuracy checks
# Tolerances against the float32 eager output, per computing precision. ``atol`` is relative to the
# output's scale (``max(1, max |reference|)``), so the same rule holds for any logit magnitude.
TOLERANCES: dict[str, dict[str, float]] = {
    # Same precision, different arithmetic order (fusion, folding, layout, another kernel): rounding of
    # 24-bit mantissas compounded over up to ~100 layers stays near 1e-4; 1e-3 leaves 10x margin and is
    # still a thousand times below a real bug (a wrong graph is off by the output's own scale).
    "float32": {"atol": 1e-3, "min_cosine": 0.99999},
    # fp16 keeps 11 significant bits: each rounding is up to 0.05% and a deep network compounds them.
    "float16": {"atol": 5e-2, "min_cosine": 0.999},
    # bf16 keeps only 8 significant bits (0.4% per rounding, 8x coarser than fp16): on a random-weight
    # ResNet-101, whose logits are small differences of large sums, errors reach tens of percent of the
    # logit scale, so the check is correspondingly loose; accuracy on a trained model is the real test.
    "bfloat16": {"atol": 0.3, "min_cosine": 0.98},
}


def tolerance(precision: str, reference: Any) -> dict[str, float]:
    """``assert_outputs_close`` keyword arguments for ``precision`` against the float32 ``reference``."""
    if precision not in TOLERANCES:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(TOLERANCES)}")
    from helpers.core.comparison import to_numpy

    scale = max(1.0, float(np.abs(to_numpy(reference)).max()))
    tol = TOLERANCES[precision]
    return {"atol": tol["atol"] * scale, "min_cosine": tol["min_cosine"]}


# --------------------------------------------------------------------------------------- PyTorch
def reduced_precision_dtype(device: Any) -> Any:
    """The autocast dtype worth using on ``device``: bfloat16 on CPU, float16 on CUDA."""
    import torch

    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"no autocast choice for device type {device.type!r}")
    return torch.bfloat16 if device.type == "cpu" else torch.float16


def autocast_fn(model: Any, device: Any, dtype: Any = None) -> Callable[[Any], Any]:
    """``x -> model(x)`` under ``torch.autocast`` (and ``inference_mode``) in ``dtype`` (default per device)."""
    import torch

    device = torch.device(device)
    dtype = dtype or reduced_precision_dtype(device)

    def run(x: Any) -> Any:
        with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
            return model(x)

    return run


def fold_conv_bn(model: Any) -> Any:
    """A ``torch.fx.GraphModule`` with every Conv2d + BatchNorm2d pair folded into one Conv2d.

    Valid in eval mode only (the BN running statistics become constants of the conv).
    """
    import torch
    from torch.fx.experimental.optimization import fuse

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"fold_conv_bn needs a torch.nn.Module, got {type(model).__name__}")
    _check_eval(model)
    return fuse(copy.deepcopy(model))


def to_channels_last(model: Any) -> Any:
    """A copy of ``model`` with 4-D weights stored channels-last (NHWC), the layout oneDNN and tensor cores prefer."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"to_channels_last needs a torch.nn.Module, got {type(model).__name__}")
    return copy.deepcopy(model).to(memory_format=torch.channels_last)


TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def torch_compile(model: Any, mode: str = "default") -> Any:
    """``torch.compile(model, mode=mode)``, with TorchInductor's CPU kernels using PyTorch's *current* thread count.

    Inductor writes its thread count into the C++ kernels it generates (``#pragma omp parallel
    num_threads(N)``), and its on-disk cache can hand back kernels built for another count; on a
    busy machine kernels with too many threads are many times slower. Setting
    ``torch._inductor.config.cpp.threads`` pins it (and makes it part of the cache key).
    """
    import torch
    import torch._inductor.config as inductor_config

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"torch_compile needs a torch.nn.Module, got {type(model).__name__}")
    if mode not in TORCH_COMPILE_MODES:
        raise ValueError(
            f"unknown torch.compile mode {mode!r}; use one of {', '.join(TORCH_COMPILE_MODES)}"
        )
    inductor_config.cpp.threads = torch.get_num_threads()
    return torch.compile(model, mode=mode)
