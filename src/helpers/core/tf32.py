"""TF32: PyTorch's and OneFlow's switches for it, and TF32 emulated on a CPU.

:func:`strict_fp32` runs a block in IEEE float32 in PyTorch (:func:`set_tf32` / :func:`restore_tf32`
across PyTorch's two APIs for it); OneFlow reads its settings when it creates its CUDA handles:
:func:`oneflow_strict_fp32_env` is the environment to set before ``import oneflow``.
:func:`emulate_tf32` computes convolutions and linear layers as TF32 tensor cores do, on any device,
to prove tolerances without a GPU. :mod:`helpers.core.precision` re-exports what the pages call.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "ONEFLOW_TF32_ENV",
    "NVIDIA_TF32_ENV",
    "nvidia_tf32_overridden",
    "gpu_tf32_capable",
    "backend_fp32_precision",
    "set_tf32",
    "restore_tf32",
    "strict_fp32",
    "oneflow_strict_fp32_env",
    "emulate_tf32",
]

# Environment variables that must be set before the library they govern creates its CUDA handles.
ONEFLOW_TF32_ENV = "ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"
NVIDIA_TF32_ENV = "NVIDIA_TF32_OVERRIDE"


def nvidia_tf32_overridden() -> bool:
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS and cuDNN ignore every request for TF32."""
    return os.environ.get(NVIDIA_TF32_ENV, "").strip() == "0"


def gpu_tf32_capable(index: int) -> bool:
    """Whether CUDA device ``index`` has TF32 tensor cores (compute capability 8.0 or newer).

    Without a visible GPU (a CPU machine asked about 'cuda') the answer is True: the GPUs this
    course targets are Ampere or newer.
    """
    try:
        import torch

        return not torch.cuda.is_available() or torch.cuda.get_device_capability(index) >= (8, 0)
    except Exception:  # no usable torch/CUDA: fall back to the course's GPUs
        return True


def _quiet_getattr(obj: Any, name: str, default: Any = None) -> Any:
    """getattr without the deprecation warnings PyTorch's legacy TF32 flags may print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(obj, name, default)


def backend_fp32_precision(node: Any, *parents: Any) -> str | None:
    """PyTorch >= 2.9's ``fp32_precision`` of a backend, following 'none' up to its parents."""
    for n in (node, *parents):
        value = _quiet_getattr(n, "fp32_precision")
        if value not in (None, "none"):
            return str(value)
    return None


def _tf32_objects(torch: Any, op: str) -> tuple[Any, Any]:
    """(legacy flag owner, per-backend setting owner) for 'conv' or 'matmul'."""
    b = torch.backends
    return (b.cudnn, b.cudnn.conv) if op == "conv" else (b.cuda.matmul, b.cuda.matmul)


# ------------------------------------------------------------------------------ switching TF32 off
def _get_tf32_setting(torch: Any, op: str) -> tuple[str, Any]:
    """('legacy', allow_tf32) as the chapters set it, or ('new', fp32_precision) when PyTorch refuses
    the legacy getter (it does once a process has used both APIs)."""
    legacy, new = _tf32_objects(torch, op)
    try:
        return ("legacy", bool(_quiet_getattr(legacy, "allow_tf32")))
    except RuntimeError:
        return ("new", new.fp32_precision)


def _set_tf32_setting(torch: Any, op: str, api: str, value: Any) -> None:
    legacy, new = _tf32_objects(torch, op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if api == "legacy":
            legacy.allow_tf32 = value
        else:
            new.fp32_precision = value


def set_tf32(enabled: bool) -> dict[str, Any]:
    """Allow (True) or forbid (False) TF32 for PyTorch's cuDNN convolutions and CUDA matmuls.

    Sets ``torch.backends.cudnn.allow_tf32`` and the float32 matmul precision ('highest' to
    forbid, which also keeps oneDNN on the CPU in IEEE float32; 'high' to allow), or, where
    PyTorch refuses these because its per-backend API was used in the process, the per-backend
    ``fp32_precision`` settings. Returns the previous settings for :func:`restore_tf32`::

        before = set_tf32(False)   # the rest of the notebook in IEEE float32
    """
    import torch

    try:
        matmul_precision: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # PyTorch >= 2.9 after a mix of its two APIs
        matmul_precision = None
    before = {op: _get_tf32_setting(torch, op) for op in ("conv", "matmul")}
    before["float32_matmul_precision"] = matmul_precision
    new, api = "tf32" if enabled else "ieee", before["conv"][0]
    _set_tf32_setting(torch, "conv", api, bool(enabled) if api == "legacy" else new)
    if matmul_precision is not None:
        torch.set_float32_matmul_precision("high" if enabled else "highest")
    else:
        _set_tf32_setting(torch, "matmul", "new", new)
    return before


def restore_tf32(before: dict[str, Any]) -> None:
    """Put back the TF32 settings :func:`set_tf32` returned."""
    import torch

    _set_tf32_setting(torch, "conv", *before["conv"])
    if before["float32_matmul_precision"] is not None:
        torch.set_float32_matmul_precision(before["float32_matmul_precision"])
    else:
        _set_tf32_setting(torch, "matmul", *before["matmul"])


@contextmanager
def strict_fp32() -> Iterator[None]:
    """PyTorch in IEEE float32 inside the block (cuDNN and cuBLAS TF32 off); settings restored
    after. OneFlow cannot be switched so: see :func:`oneflow_strict_fp32_env`."""
    before = set_tf32(False)
    try:
        yield
    finally:
        restore_tf32(before)


def oneflow_strict_fp32_env() -> dict[str, str]:
    """Environment for IEEE float32 in OneFlow 0.9.0 on a GPU, to set before ``import oneflow``
    (or in a child's environment): ``ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION=0`` for its cuBLAS
    matmuls, ``NVIDIA_TF32_OVERRIDE=0`` for its cuDNN convolutions. The NVIDIA variable acts on
    every library of the process, PyTorch included: that process cannot show TF32."""
    return {ONEFLOW_TF32_ENV: "0", NVIDIA_TF32_ENV: "0"}


# --------------------------------------------------------------------------------- TF32 on a CPU
ROUNDINGS = ("nearest", "truncate")


def round_mantissa(x: Any, bits: int = 10, rounding: str = "nearest") -> Any:
    """A float32 tensor rounded to ``bits`` stored mantissa bits (10: TF32, 7: bf16), in float32.

    On the bit pattern: 'nearest' (ties to even) adds ``2^(drop-1) - 1`` plus the lowest kept bit,
    then clears the ``drop`` low bits; 'truncate' only clears them (toward zero: what a tensor core
    does with a float32 register it was not given rounded). Integer arithmetic wraps modulo 2^32,
    so the sign rides along, inf stays inf and a value rounded past the largest finite number
    becomes inf, as in hardware; NaN (whose payload could carry into the sign) passes unchanged.
    """
    import torch

    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 23:
        raise ValueError(f"bits must be an int in 1..23 (float32 stores 23), got {bits!r}")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"round_mantissa needs a float32 tensor, got {getattr(x, 'dtype', x)!r}")
    drop = 23 - bits
    b = x.detach().view(torch.int32)
    r = b.clone()
    if rounding == "nearest":
        r += (b >> drop) & 1  # the lowest kept bit: ties go to even
        r += (1 << (drop - 1)) - 1
    r &= (0xFFFFFFFF ^ ((1 << drop) - 1)) - (1 << 32)  # the mask as a signed int32
    return torch.where(torch.isnan(x), x.detach(), r.view(torch.float32))


_STRAIGHT_THROUGH: Any = None


def _round_tensor(t: Any, rounding: str) -> Any:
    """A float32 tensor rounded to TF32, its gradient passed straight through; others unchanged."""
    global _STRAIGHT_THROUGH
    import torch

    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        return t
    if not (t.requires_grad and torch.is_grad_enabled()):
        return round_mantissa(t, rounding=rounding)
    if _STRAIGHT_THROUGH is None:

        class RoundMantissa(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, rounding: str) -> Any:  # noqa: ARG004
                return round_mantissa(x, rounding=rounding)

            @staticmethod
            def backward(ctx: Any, grad: Any) -> tuple[Any, None]:  # noqa: ARG004
                return grad, None

        _STRAIGHT_THROUGH = RoundMantissa
    return _STRAIGHT_THROUGH.apply(t, rounding)


@contextmanager
def emulate_tf32(module: Any, *, rounding: str = "nearest") -> Iterator[Any]:
    """Run ``module``'s convolutions and linear layers as TF32 tensor cores would, on any device.

    Every ``Conv*``, ``ConvTranspose*`` and ``Linear`` sees its float32 input and weight rounded
    to a 10-bit mantissa (:func:`round_mantissa`) and accumulates in float32, as TF32 does.
    Weights are rounded in place and restored bit for bit on exit; gradients pass the rounding
    unchanged; ``torch.matmul`` / ``@`` in a ``forward`` are not covered. Yields ``module``.
    """
    import torch

    kinds = (torch.nn.modules.conv._ConvNd, torch.nn.Linear)
    layers = [m for m in module.modules() if isinstance(m, kinds)]
    saved: dict[int, tuple[Any, Any]] = {}
    handles = [
        layer.register_forward_pre_hook(lambda _m, a: tuple(_round_tensor(t, rounding) for t in a))
        for layer in layers
    ]
    try:
        with torch.no_grad():
            for layer in layers:
                w = layer.weight
                if w.dtype == torch.float32 and id(w) not in saved:
                    saved[id(w)] = (w, w.detach().clone())
                    w.copy_(round_mantissa(w.detach(), rounding=rounding))
        yield module
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for w, original in saved.values():
                w.copy_(original)
