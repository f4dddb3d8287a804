"""Chapter 6's OneFlow ``nn.Graph`` switches and the ablation that runs them in fresh processes.

OneFlow reads its MLIR switches once, at ``import oneflow``: each MLIR setting runs in a fresh
process, which can only run code it imports. The switches are written on chapter 6's page
(``#@save`` cells); :func:`oneflow_graph_ablation` is the subprocess target. Importing this
module imports OneFlow: set the MLIR (and TF32) variables first.
"""

from __future__ import annotations

import copy
import inspect
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from helpers.compiling import graphs
from helpers.workload import models

__all__ = [
    "SwitchedGraph",
    "MLIR_ROUND_TRIP",
    "PAD_CONV_FUSION_ENV",
    "BN_FOLDING_ENV",
    "MLIR_VARS",
    "explicit_padding",
    "oneflow_graph_ablation",
    "tensorrt_fp16",
]


def _variant_switches(variant: dict[str, Any]) -> tuple[str, dict[str, bool]]:
    """A variant's name and every switch of :class:`SwitchedGraph` (its keyword-only arguments),
    on or off."""
    params = inspect.signature(SwitchedGraph.__init__).parameters.values()
    names = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    name = variant.get("name") if isinstance(variant, dict) else None
    if not name or not isinstance(name, str):
        raise ValueError(f"each variant needs a non-empty 'name', got {variant!r}")
    unknown = set(variant) - {"name", NATIVE_PADDING, *names}
    if unknown:
        raise ValueError(
            f"variant {name!r} has unknown switches {sorted(unknown)}; "
            f"use {', '.join(names)} (and {NATIVE_PADDING!r})"
        )
    return name, {k: bool(variant.get(k, False)) for k in names}


# A variant key that is not a graph switch: build the graph on the model as it is (flowvision's
# convolutions pad their own input) instead of on explicit_padding's copy. The control run for the
# pad+conv fusion: what the fusion can at best win back.
NATIVE_PADDING = "native_padding"


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
    apart: Sequence[Sequence[str]] = (),
) -> dict[str, Any]:
    """Build, compile and time one :class:`SwitchedGraph` per variant (a subprocess target; checks nothing).

    ``weights_path``: an ``.npz`` of ``arch``'s PyTorch state dict; ``input_path``: an ``.npy``
    batch. A variant is ``{"name": ..., <switch>: bool}``, built on :func:`explicit_padding`'s
    copy unless ``"native_padding": True`` (the control run). The MLIR passes and a GPU's TF32
    are whatever this process's environment set (returned as ``mlir_env``, ``precision_env``).
    Per variant: its ``math_mode`` read in the child (``'fp16'`` with AMP on a GPU, ``'tf32'`` by
    OneFlow's default on an Ampere-or-newer GPU, else ``'fp32'``), ``padding``, ``compile_s``
    (the first call), its interleaved Measurement's fields (the pairs of ``apart`` never back to
    back), op counts before and after OneFlow's passes, and its output in ``out_dir/<name>.npy``.
    """
    from helpers.compiling.graph_ops import oneflow_op_counts
    from helpers.core import precision
    from helpers.core.environment import flow_device, import_oneflow, quiet_native_stderr
    from helpers.measure.timer import benchmark_interleaved

    switches = dict(map(_variant_switches, variants))
    native = {v["name"] for v in variants if v.get(NATIVE_PADDING)}
    if not switches:
        raise ValueError("no variants given")
    if len(switches) != len(variants):
        raise ValueError("variant names must be unique")
    flow = import_oneflow()
    device = flow_device("auto")
    model = models.build_classifier("oneflow", arch, num_classes=num_classes)
    with np.load(weights_path) as npz:
        models.load_numpy_state(model, dict(npz))
    as_is = model.eval().to(device)  # flowvision's convolutions pad their own input
    model = explicit_padding(as_is).to(device)
    x = flow.tensor(np.load(input_path)).to(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiled, rows = {}, {}
    for name, sw in switches.items():
        with quiet_native_stderr():  # the first graph of a process logs a harmless 'no CUDA driver'
            g = SwitchedGraph(as_is if name in native else model, **sw)
        start = time.perf_counter()
        y = g(x).numpy()
        compile_s = time.perf_counter() - start
        np.save(out / f"{name}.npy", y.astype(np.float32))
        compiled[name] = g
        rows[name] = {
            "switches": sw,
            "padding": "native" if name in native else "explicit",
            "math_mode": precision.oneflow_math_mode(device, amp=sw["amp"]),
            "compile_s": compile_s,
            "output": str(out / f"{name}.npy"),
            "traced_op_counts": oneflow_op_counts(g, stage="traced"),
            "op_counts": oneflow_op_counts(g),
        }
    times = benchmark_interleaved(
        {n: (lambda g=g: g(x).numpy()) for n, g in compiled.items()},
        framework="oneflow",
        warmup=warmup,
        repeats=repeats,
        items=int(x.shape[0]),
        apart=[tuple(pair) for pair in apart],
    )
    for name, m in times.items():
        rows[name].update(
            {k: v for k, v in m.as_dict().items() if k not in ("label", "device")},
            times_s=m.times_s,
        )
    mlir = {k: os.environ[k] for k in MLIR_VARS if k in os.environ}
    tf32_vars = (precision.ONEFLOW_TF32_ENV, precision.NVIDIA_TF32_ENV)
    math_env = {k: os.environ[k] for k in tf32_vars if k in os.environ}
    return {"device": str(device), "mlir_env": mlir, "precision_env": math_env, "variants": rows}


def tensorrt_fp16(
    model: Any, example: Any, *, network: str | None, work_dir: str | Path, max_batch: int = 64
) -> Any:
    """The case study's last step on a GPU: ``model`` in TensorRT fp16, through ONNX Runtime.

    Exports a CPU copy of ``model`` to ONNX, verified in strict float32 (``network``'s bound),
    and opens it in ONNX Runtime's TensorRT provider, fp16 on, one profile for batch 1 to
    ``max_batch`` (one engine, built on the first run in minutes, cached in ``work_dir/trt``;
    TensorRT picks its own layouts, NHWC where it pays). Returns the runner; raises
    ``ProviderUnavailableError`` where TensorRT cannot run. The caller checks and times it.
    """
    from helpers.deploy import export, runtimes

    work = Path(work_dir)
    cpu_model = copy.deepcopy(model).cpu().eval()
    path = export.export_and_verify(
        cpu_model, example[:2].detach().cpu(), work / "resnet.onnx", network=network
    ).path
    profile = runtimes.trt_profile(path, 1, min(8, max_batch), max_batch)
    return runtimes.create_session(
        path,
        "tensorrt",
        trt_cache_dir=work / "trt",
        provider_options={"trt_fp16_enable": True, **profile},
        name="TensorRT fp16",
    )


# ---- saved from notebooks/06_compile_optimisations.ipynb by tools/save_cells.py: edit it there ----
class SwitchedGraph(graphs.InferenceGraph):
    """Chapter 3's inference nn.Graph with case study 1's graph.config switches."""

    def __init__(
        self,
        model: Any,
        *,
        amp: bool = False,
        conv_search: bool = False,
        add_fusion: bool = False,
    ) -> None:
        super().__init__(model)
        if amp:  # mixed precision: float16 kernels where the device has them
            self.config.enable_amp(True)
        if conv_search:  # time cuDNN's convolution algorithms on the first run
            self.config.enable_cudnn_conv_heuristic_search_algo(False)  # not its guess
        if add_fusion:  # the residual add done by the op that computes one input
            self.config.allow_fuse_add_to_output(True)


def explicit_padding(model: Any) -> Any:
    """A copy: each zero-padded Conv2d becomes ZeroPad2d + an unpadded Conv2d."""
    nn = models.nn_namespace(models.framework_of(model))[1]  # torch.nn or oneflow.nn
    out = copy.deepcopy(model)

    def rewrite(module: Any) -> int:
        n = 0
        for name, child in list(module.named_children()):
            pad = getattr(child, "padding", None)
            if (
                isinstance(child, nn.Conv2d)
                and child.padding_mode == "zeros"
                and isinstance(pad, tuple)
                and any(pad)
            ):
                ph, pw = pad
                child.padding = (0, 0)
                setattr(module, name, nn.Sequential(nn.ZeroPad2d((pw, pw, ph, ph)), child))
                n += 1
            else:
                n += rewrite(child)
        return n

    if rewrite(out) == 0:
        raise ValueError("the model has no zero-padded Conv2d to rewrite")
    return out


MLIR_ROUND_TRIP: dict[str, str] = {"ONEFLOW_MLIR_ENABLE_ROUND_TRIP": "1"}  # both need it
PAD_CONV_FUSION_ENV: dict[str, str] = {
    **MLIR_ROUND_TRIP,
    "ONEFLOW_MLIR_FUSE_FORWARD_OPS": "1",
}
BN_FOLDING_ENV: dict[str, str] = {
    **MLIR_ROUND_TRIP,
    "ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION": "1",
}
# every variable above: a fresh process must not inherit any of them from its parent
MLIR_VARS: tuple[str, ...] = tuple(sorted({**PAD_CONV_FUSION_ENV, **BN_FOLDING_ENV}))
# ---- end of cells saved from notebooks/06_compile_optimisations.ipynb ----
