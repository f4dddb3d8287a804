"""TF32 switched off: PyTorch's and OneFlow's TF32 settings, read and set, and put back.

On an Ampere-or-newer GPU, float32 convolutions and matmuls may run in TF32 (a 10-bit mantissa).
:func:`strict_fp32` runs a block in IEEE float32 in PyTorch (:func:`set_tf32` and
:func:`restore_tf32` underneath, across PyTorch's two APIs for it); OneFlow reads its settings
from the environment when it creates its CUDA handles, so :func:`oneflow_strict_fp32_env` gives
the variables to set before ``import oneflow``. :func:`torch_tf32_allowed` and
:func:`gpu_tf32_capable` are what :func:`helpers.core.precision.torch_math_mode` reads.
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
    "torch_tf32_allowed",
    "set_tf32",
    "restore_tf32",
    "strict_fp32",
    "oneflow_strict_fp32_env",
]

# Environment variables that must be set before the library they govern creates its CUDA handles.
ONEFLOW_TF32_ENV = "ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"


NVIDIA_TF32_ENV = "NVIDIA_TF32_OVERRIDE"


def nvidia_tf32_overridden() -> bool:
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS and cuDNN ignore every request for TF32."""
    return os.environ.get(NVIDIA_TF32_ENV, "").strip() == "0"


def gpu_tf32_capable(index: int, tf32_capable: bool | None) -> bool:
    """Whether CUDA device ``index`` has TF32 tensor cores (compute capability 8.0 or newer).

    ``tf32_capable`` overrides the question. Without a visible GPU (a CPU machine asked about
    'cuda') the answer is True: the GPUs this course targets are Ampere or newer.
    """
    if tf32_capable is not None:
        return bool(tf32_capable)
    try:
        import torch

        if not torch.cuda.is_available():
            return True
        return tuple(torch.cuda.get_device_capability(index)) >= (8, 0)
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
        value = _quiet_getattr(n, "fp32_precision") if n is not None else None
        if value not in (None, "none"):
            return str(value)
    return None


def _tf32_objects(torch: Any, op: str) -> tuple[Any, Any, tuple[Any, ...]]:
    """(legacy flag owner, per-backend setting owner, its parents) for 'conv' or 'matmul'."""
    b = torch.backends
    if op == "conv":
        return b.cudnn, getattr(b.cudnn, "conv", None), (b.cudnn, b)
    return b.cuda.matmul, b.cuda.matmul, (b,)


def torch_tf32_allowed(torch: Any, op: str) -> bool:
    """Whether PyTorch's settings allow TF32 for CUDA 'conv' (cuDNN) or 'matmul' (cuBLAS).

    PyTorch >= 2.9 keeps a per-backend ``fp32_precision`` ('tf32' / 'ieee' / 'none' = ask the
    parent) that the legacy ``allow_tf32`` flags also set; it is read first because the legacy
    getters raise once both APIs were used in a process.
    """
    legacy, new, parents = _tf32_objects(torch, op)
    if new is not None and isinstance(_quiet_getattr(new, "fp32_precision"), str):
        return backend_fp32_precision(new, *parents) == "tf32"
    return bool(_quiet_getattr(legacy, "allow_tf32", False))


# ------------------------------------------------------------------------------ switching TF32 off
def _get_tf32_setting(torch: Any, op: str) -> tuple[str, Any]:
    """('legacy', allow_tf32) as the chapters set it, or ('new', fp32_precision) when PyTorch refuses
    the legacy getter (it does once a process has used both APIs)."""
    legacy, new, _ = _tf32_objects(torch, op)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("legacy", bool(legacy.allow_tf32))
    except (RuntimeError, AttributeError):
        return ("new", new.fp32_precision)


def _set_tf32_setting(torch: Any, op: str, api: str, value: Any) -> None:
    legacy, new, _ = _tf32_objects(torch, op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if api == "legacy":
            legacy.allow_tf32 = value
        else:
            new.fp32_precision = value


def set_tf32(enabled: bool) -> dict[str, Any]:
    """Allow (True) or forbid (False) TF32 for PyTorch's cuDNN convolutions and CUDA matmuls.

    Sets ``torch.backends.cudnn.allow_tf32`` (the flag the chapters use) and the float32 matmul
    precision: ``torch.set_float32_matmul_precision('highest')`` to forbid, which also keeps
    oneDNN on the CPU in IEEE float32, ``'high'`` to allow. Where PyTorch >= 2.9 refuses these
    because its newer per-backend API was used in the process, the per-backend settings
    (``torch.backends.cudnn.conv.fp32_precision``, ``torch.backends.cuda.matmul.fp32_precision``)
    are set instead. Returns the previous settings for :func:`restore_tf32`::

        before = set_tf32(False)   # the rest of the notebook in IEEE float32
    """
    import torch

    try:
        matmul_precision: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # PyTorch >= 2.9 after a mix of its two APIs
        matmul_precision = None
    before = {
        "conv": _get_tf32_setting(torch, "conv"),
        "matmul": _get_tf32_setting(torch, "matmul"),
        "float32_matmul_precision": matmul_precision,
    }
    api = before["conv"][0]
    _set_tf32_setting(
        torch, "conv", api, bool(enabled) if api == "legacy" else ("tf32" if enabled else "ieee")
    )
    if matmul_precision is not None:
        torch.set_float32_matmul_precision("high" if enabled else "highest")
    else:
        _set_tf32_setting(torch, "matmul", "new", "tf32" if enabled else "ieee")
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
    """PyTorch in IEEE float32 inside the block (cuDNN and cuBLAS TF32 off); settings restored after.

    OneFlow cannot be switched like this: it reads its settings from the environment when it
    creates its CUDA handles. Set :func:`oneflow_strict_fp32_env` before ``import oneflow``
    (or in a child process's environment).
    """
    before = set_tf32(False)
    try:
        yield
    finally:
        restore_tf32(before)


def oneflow_strict_fp32_env() -> dict[str, str]:
    """Environment for IEEE float32 in OneFlow 0.9.0 on a GPU; set it before ``import oneflow``.

    ``ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION=0`` turns TF32 off for OneFlow's cuBLAS matmuls;
    ``NVIDIA_TF32_OVERRIDE=0`` for its cuDNN convolutions, which that variable does not govern.
    The NVIDIA variable acts on every library of the process, PyTorch included: a process that
    sets it cannot show TF32 (run the TF32 measurement in another process).
    """
    return {ONEFLOW_TF32_ENV: "0", NVIDIA_TF32_ENV: "0"}
