"""One precision policy: the math mode really in effect, and the tolerance it implies.

On an Ampere-or-newer NVIDIA GPU, float32 convolutions and matmuls may run in **TF32** (inputs
rounded to a 10-bit mantissa, unit roundoff 2^-11 like float16; products summed in float32).
PyTorch allows it for cuDNN convolutions by default (not for matmuls); OneFlow 0.9.0 for both. A
float32 check written on a CPU (``atol=1e-4``) then fails on the GPU although nothing is wrong.
This module reads the mode in effect from each framework's settings and gives its tolerance::

    mode = precision.coarsest(precision.torch_math_mode(device), precision.oneflow_math_mode(fdevice))
    tol = precision.tolerance(mode, scale=precision.output_scale(ref))
    assert_outputs_close(out, ref, **tol.as_kwargs(), name="OneFlow vs PyTorch")

The TF32 switches and ``emulate_tf32`` live in :mod:`helpers.core.tf32`, re-exported here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from helpers.core.checks import check_number
from helpers.core.tf32 import (
    NVIDIA_TF32_ENV,
    ONEFLOW_TF32_ENV,
    backend_fp32_precision,
    emulate_tf32,
    gpu_tf32_capable,
    nvidia_tf32_overridden,
    oneflow_strict_fp32_env,
    restore_tf32,
    set_tf32,
    strict_fp32,
)

__all__ = [
    "NETWORK_ACCUMULATION",
    "MEASURED_ACCUMULATION",
    "ONEFLOW_TF32_ENV",
    "NVIDIA_TF32_ENV",
    "CUBLAS_DETERMINISTIC_CONFIG",
    "unit_roundoff",
    "coarsest",
    "torch_math_mode",
    "oneflow_math_mode",
    "Tolerance",
    "tolerance",
    "output_scale",
    "measure_accumulation",
    "set_tf32",
    "restore_tf32",
    "strict_fp32",
    "oneflow_strict_fp32_env",
    "deterministic",
    "emulate_tf32",
]

# Unit roundoff u of each math mode: the largest relative error of rounding a real number to it
# (round-to-nearest), 2^-(stored mantissa bits + 1): fp32 23 bits -> 2^-24; tf32 (fp32's exponent,
# 10-bit mantissa; tensor cores round each input and accumulate in fp32) -> 2^-11; bf16 7 bits ->
# 2^-8; fp16 10 bits -> 2^-11 (its overflow above 65504 is not modelled).
# int8: symmetric linear quantization, q = round(x / s), s = max|x| / 127, errs by at most
# s / 2 = max|x| / 254: u = 1/254 (about 2^-8) relative to the tensor's RANGE, not to each element
# (small elements lose far more than 1/254 of themselves).
UNIT_ROUNDOFF: dict[str, float] = {
    "fp32": 2.0**-24,
    "tf32": 2.0**-11,
    "bf16": 2.0**-8,
    "fp16": 2.0**-11,
    "int8": 1.0 / 254.0,
}

# The accumulation factor of :func:`tolerance`: how many times the mode's rounding a compared output
# may move, relative to its scale. Measured on this course's models (random weights, BatchNorm
# calibrated on the course's images, CPU; TF32 emulated with emulate_tf32, fp16 a .half() copy,
# bf16 CPU autocast): max |error| / max |fp32 output| in units of (u + log2(4608) u_fp32), 2026-12,
# torch 2.10 (tools/measure_precision.py reproduces it):
#                      fp32 vs float64   fp32 channels_last   TF32    fp16    bf16
#   ResNet-18, 64 px b32        3.4             4.6            7.0     8.8     9.6
#   ResNet-18, 224 px b8        1.3             2.2            2.9     3.6     3.3
#   ResNet-50, 112 px b8       25.9            20.3           59.2    63.9    47.0
#   ResNet-101, 112 px b8     154.1           122.4          242.9   290.2    85.7
#   ResNet-101, 224 px b4        -              79            161      -       52    (earlier run)
#   embedder (MobileNetV2 0.5x), 64 px b32  15.9  7.2         77.9    98.7    80.4
# A planted bug is far outside every row: BatchNorm eps 1e-5 -> 1e-3 moves the outputs by 24,000 to
# 1,350,000 units, one convolution's weights x 1.01 by 15,000 to 38,000 (float32 units).
# NETWORK_ACCUMULATION: about twice each network's largest row (a power of two). Another network
# is measured on the spot (:func:`measure_accumulation`, kept for the process) or gets "network"
# (512, the deepest one's) with one printed line. "op" = 8: one convolution or matmul on its own
# (measured: 0.65 rounded, 1.5 truncated, a 3x3x512 convolution, TF32).
ACCUMULATION: dict[str, float] = {"op": 8.0, "network": 512.0}
NETWORK_ACCUMULATION: dict[str, float] = {
    "resnet18": 16.0,
    "resnet34": 64.0,
    "resnet50": 128.0,
    "resnet101": 512.0,
    "mobilenet_v2": 256.0,
}
# Networks measured in this process by measure_accumulation (name -> factor).
MEASURED_ACCUMULATION: dict[str, float] = {}
# The longest dot product of the course's models: 3 x 3 x 512 inputs of a ResNet convolution.
REDUCTION = 3 * 3 * 512

CUBLAS_DETERMINISTIC_CONFIG = ":4096:8"

_OPS = ("conv", "matmul", "model")


def unit_roundoff(mode: str) -> float:
    """The unit roundoff of a math mode (see :data:`UNIT_ROUNDOFF`)."""
    if mode not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown math mode {mode!r}; use one of {', '.join(UNIT_ROUNDOFF)}")
    return UNIT_ROUNDOFF[mode]


def coarsest(*modes: str) -> str:
    """The least precise of ``modes`` (a comparison of two results takes the coarser's tolerance);
    ties (tf32 and fp16) keep the first given."""
    if not modes:
        raise ValueError("coarsest() needs at least one mode")
    return max(modes, key=unit_roundoff)


def _device_type_and_index(device: Any, op: str) -> tuple[str, int]:
    """('cuda', 1) from 'cuda:1', torch.device or oneflow.device ('cuda': index 0); checks ``op``."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {', '.join(_OPS)}, got {op!r}")
    text = str(device if device is not None else "cpu")
    kind, _, index = text.partition(":")
    kind = kind.strip().lower()
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"math modes are known for 'cpu' and 'cuda' devices, got {text!r}")
    return kind, int(index) if index.strip().isdigit() else 0


def torch_math_mode(device: Any = "cpu", *, op: str = "model") -> str:
    """The math mode PyTorch's float32 convolutions / matmuls run in on ``device``, right now.

    From PyTorch's settings: autocast for the device ('bf16' / 'fp16'); on CUDA cuDNN's TF32
    (convolutions, on by default) and the float32 matmul precision ('highest', the default, is
    off); on the CPU oneDNN's ``fp32_precision``. TF32 needs compute capability 8.0+ (assumed
    without a visible GPU) and is off under ``NVIDIA_TF32_OVERRIDE=0``. ``op``: 'conv',
    'matmul' or 'model' (the coarser: a ResNet on CUDA by default is 'tf32'). What the settings
    *allow* (a library may still pick an exact kernel), so its tolerance is never too tight.
    """
    kind, index = _device_type_and_index(device, op)
    import torch

    if torch.is_autocast_enabled(kind):
        dtype = torch.get_autocast_dtype(kind)
        cast = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
        modes = {"conv": cast, "matmul": cast}
    elif kind == "cpu":  # PyTorch >= 2.9 can let oneDNN use bf16 or tf32 for float32
        mk = torch.backends.mkldnn
        found = {k: backend_fp32_precision(getattr(mk, k), mk, torch.backends) for k in _OPS[:2]}
        modes = {k: p if p in ("bf16", "tf32") else "fp32" for k, p in found.items()}
    else:
        # per-backend fp32_precision ('none': ask the parent), set by the legacy flags too
        b = torch.backends
        allowed = gpu_tf32_capable(index) and not nvidia_tf32_overridden()
        owners = {"conv": (b.cudnn.conv, b.cudnn, b), "matmul": (b.cuda.matmul, b)}
        tf32 = {k: allowed and backend_fp32_precision(*o) == "tf32" for k, o in owners.items()}
        tf32["conv"] = tf32["conv"] and bool(b.cudnn.enabled)
        modes = {k: "tf32" if v else "fp32" for k, v in tf32.items()}
    return coarsest(modes["conv"], modes["matmul"]) if op == "model" else modes[op]


def oneflow_math_mode(device: Any = "cpu", *, op: str = "model", amp: bool = False) -> str:
    """The math mode OneFlow 0.9.0's float32 convolutions / matmuls run in on ``device``, read
    from the environment as OneFlow reads it (without importing OneFlow). CPU: 'fp32'.

    - CUDA matmuls (cuBLAS, the fused MLP kernel too): 'tf32' unless
      ``ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION`` is false (default true; read when a device's CUDA
      stream is created, ``oneflow/core/ep/cuda/cuda_stream.cpp``: set it before ``import oneflow``).
    - CUDA convolutions: 'tf32' even when that variable is 0: they take cuDNN's
      ``CUDNN_DEFAULT_MATH`` (``oneflow/core/device/cudnn_conv_util.cpp``); only
      ``NVIDIA_TF32_OVERRIDE=0`` turns it off.

    ``amp=True`` (an ``nn.Graph`` with ``config.enable_amp(True)`` on CUDA): 'fp16'.
    """
    kind, index = _device_type_and_index(device, op)
    if kind == "cpu":
        return "fp32"
    if amp:
        return "fp16"
    if not gpu_tf32_capable(index) or nvidia_tf32_overridden():
        return "fp32"
    # OneFlow's ParseBooleanFromEnv: unset -> true; '1', 'true', 'yes', 'on', 'y' (any case) -> true
    flag = os.environ.get(ONEFLOW_TF32_ENV, "1").strip().lower() in ("1", "true", "yes", "on", "y")
    return "tf32" if op != "matmul" or flag else "fp32"


@dataclass(frozen=True)
class Tolerance:
    """``atol`` and ``rtol`` for a comparison (``**tol.as_kwargs()``), with where they came from."""

    mode: str
    atol: float
    rtol: float
    unit_roundoff: float
    accumulation: float
    scale: float

    def as_kwargs(self) -> dict[str, float]:
        """``{'atol': ..., 'rtol': ...}`` for :func:`helpers.core.comparison.assert_outputs_close`."""
        return {"atol": self.atol, "rtol": self.rtol}

    def __str__(self) -> str:
        return (
            f"{self.mode} tolerance: atol {self.atol:.3g}, rtol {self.rtol:.3g} "
            f"(accumulation {self.accumulation:g} x (u {self.unit_roundoff:.3g} + float32 order), "
            f"scale {self.scale:.3g})"
        )


def tolerance(
    mode: str,
    *,
    accumulation: float | str = "network",
    scale: float = 1.0,
    network: str | None = None,
) -> Tolerance:
    """The tolerance of results computed in ``mode`` (against float32 or each other):
    ``rel = accumulation * (u + log2(REDUCTION) * u_fp32)``, ``atol = rel * scale``, ``rtol = rel``.

    - ``u`` (:func:`unit_roundoff`): rounding a dot product's inputs moves each product by up to
      ``2u`` relative; summed in float32, the dot product's relative error stays of order ``u``.
    - ``log2(REDUCTION) * u_fp32``: two float32 kernels sum a dot product's terms in different
      orders (blocked / tree sums), about ``log2(K)`` roundings apart: what makes float32
      variants, devices and frameworks disagree.
    - ``accumulation``: how much a deep network amplifies them, relative to its output's scale:
      'network' (:func:`accumulation_for` ``network``; 512 without one), 'op' (8, one layer) or a
      number ('op' and a number win over ``network``).
    - ``scale``: the size of the outputs compared (:func:`output_scale` of the reference).

    For a whole network, bf16 and int8 bounds come out at or above the output's own scale:
    elementwise agreement says nothing there (compare at task level).
    """
    u = unit_roundoff(mode)
    if accumulation == "network" and network is not None:
        factor: Any = accumulation_for(network)
    else:
        factor = ACCUMULATION.get(accumulation) if isinstance(accumulation, str) else accumulation
    if factor is None:
        raise ValueError(
            f"accumulation must be a number or one of {', '.join(ACCUMULATION)}, got {accumulation!r}"
        )
    for label, value in (("accumulation", factor), ("scale", scale)):
        if check_number(label, value) <= 0:
            raise ValueError(f"{label} must be positive, got {value!r}")
    rel = float(factor) * (u + math.log2(REDUCTION) * UNIT_ROUNDOFF["fp32"])
    return Tolerance(mode, rel * float(scale), rel, u, float(factor), float(scale))


def output_scale(reference: Any, floor: float = 1.0) -> float:
    """``max(floor, max |reference|)``: the scale :func:`tolerance` multiplies ``atol`` by. The
    floor keeps small outputs (probabilities, unit-norm embeddings) from a bound tighter than
    their arithmetic."""
    import numpy as np

    from helpers.core.arrays import to_numpy

    values = to_numpy(reference)
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError("the reference must be non-empty and finite")
    return max(float(floor), float(np.abs(values).max()))


_UNMEASURED_SAID: set[str] = set()


def accumulation_for(network: str) -> float:
    """The accumulation factor for ``network``: :data:`NETWORK_ACCUMULATION`, else this process's
    :func:`measure_accumulation`, else 512 (the deepest measured network's) with one printed line."""
    if not isinstance(network, str) or not network.strip():
        raise ValueError(f"network must be a name, got {network!r}")
    known = MEASURED_ACCUMULATION | NETWORK_ACCUMULATION  # the table wins
    if network in known:
        return known[network]
    if network not in _UNMEASURED_SAID:
        _UNMEASURED_SAID.add(network)
        print(
            f"precision: {network!r} has no measured accumulation; using "
            f"{ACCUMULATION['network']:g}, the deepest measured network's (loose): measure yours "
            f"with precision.measure_accumulation(model, x, name={network!r})"
        )
    return ACCUMULATION["network"]


# The ways of computing a network that measure_accumulation sets against its float32 output.
_WAYS = ("float64", "fp32 channels_last", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class AccumulationMeasurement:
    """What :func:`measure_accumulation` found: ``units[way]``, max |error| / max |float32 output|
    in units of the way's rounding (``u + log2(REDUCTION) u_fp32``; a way the device cannot run
    is missing), and the factor chosen."""

    name: str
    units: dict[str, float]
    factor: float
    inputs: tuple[int, ...]

    def __str__(self) -> str:
        ways = ", ".join(f"{k} {v:.3g}" for k, v in self.units.items())
        way = max(self.units, key=lambda k: self.units[k])
        return (
            f"{self.name} on {'x'.join(map(str, self.inputs))} inputs, error in units of each "
            f"way's rounding: {ways}; accumulation {self.factor:g} (the power of two nearest "
            f"twice the largest, {way} {self.units[way]:.3g})"
        )


def measure_accumulation(
    model: Any, x: Any, *, name: str, register: bool = True
) -> AccumulationMeasurement:
    """Measure how much ``model`` amplifies rounding on inputs ``x``, as the course's table was.

    ``model`` (eval mode, trained or calibrated BatchNorm) runs on ``x`` in float32, float64,
    float32 channels-last, emulated TF32, bf16 autocast and float16; each one's largest
    difference from float32, relative to its scale, in units of its own rounding. The factor is
    the power of two nearest twice the largest; with ``register``, ``tolerance(...,
    network=name)`` uses it in this process. The model is not changed.
    """
    import copy

    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"measure_accumulation needs a torch.nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError("put the model in eval mode first: in train mode BatchNorm mixes a batch")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.dim() < 2 or len(x) < 2:
        raise ValueError("x must be a float32 batch of at least 2 inputs")
    fp32 = UNIT_ROUNDOFF["fp32"]
    outs: dict[str, Any] = {}
    with torch.no_grad(), strict_fp32():
        ref = model(x).float()
        scale = float(ref.abs().max())
        if not math.isfinite(scale) or scale == 0.0:
            raise ValueError(f"{name}: the float32 output is {scale}: nothing to measure against")
        outs["float64"] = copy.deepcopy(model).double()(x.double())
        cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
        outs["fp32 channels_last"] = cl(x.contiguous(memory_format=torch.channels_last))
        with emulate_tf32(copy.deepcopy(model)) as tf32:
            outs["tf32"] = tf32(x)
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            outs["bf16"] = model(x)
        try:
            outs["fp16"] = copy.deepcopy(model).half()(x.half())
        except (RuntimeError, NotImplementedError):  # an op with no float16 kernel here
            pass
    units = {
        way: float((outs[way].float() - ref).abs().max())
        / scale
        / (UNIT_ROUNDOFF.get(way, fp32) + math.log2(REDUCTION) * fp32)
        for way in _WAYS
        if way in outs
    }
    factor = 2.0 ** max(0, round(math.log2(max(2.0 * max(units.values()), 1.0))))
    if register:
        MEASURED_ACCUMULATION[name] = factor
    return AccumulationMeasurement(name, units, factor, tuple(x.shape))


@contextmanager
def deterministic(*, warn_only: bool = False) -> Iterator[None]:
    """Deterministic PyTorch algorithms inside the block, for exactness proofs; settings restored.

    ``use_deterministic_algorithms(True)`` (an op without a deterministic kernel raises),
    ``cudnn.deterministic = True``, ``cudnn.benchmark = False``, and ``CUBLAS_WORKSPACE_CONFIG=
    :4096:8`` when unset (cuBLAS is deterministic only with it, and reads it when PyTorch first
    sizes its workspace: on a GPU set it before the first CUDA matmul). On CUDA the backward of
    ``AdaptiveAvgPool2d`` (every ResNet's last pooling) has no deterministic kernel and raises:
    ``warn_only=True`` warns instead; then compare repeated runs bit for bit.
    """
    import torch

    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    env_unset = "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    if env_unset:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC_CONFIG
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2:]
        if env_unset:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
