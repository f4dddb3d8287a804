"""How close to the limit: this machine's matmul ceilings and a model's FLOPs (a roofline's two axes).

Why a module: measurement plumbing, like :mod:`helpers.core.benchmarking`. Only chapter 0 uses it,
but it holds instruments, not the lesson: a timed matrix product (timed by chapter 0's own
:func:`~helpers.core.benchmarking.time_loop`) and PyTorch's FLOP counter. The chapter's page
compares the two (the percent of peak).

The ceiling depends on the math mode (:mod:`helpers.core.precision`): a float32 model on an
Ampere-or-newer GPU runs its convolutions in TF32 by default, on tensor cores, several times
above the IEEE float32 peak. :func:`ceilings` measures one peak per mode this device offers
(float32 with TF32 off), and "% of peak" divides by the ceiling of the mode the model runs in.
"""

from __future__ import annotations

from typing import Any

from helpers.core import precision
from helpers.core.benchmarking import time_loop

__all__ = [
    "DTYPES",
    "matmul_peak_gflops",
    "ceilings",
    "count_flops",
    "percent_of_peak",
]

DTYPES = ("float32", "bfloat16", "float16")


def matmul_peak_gflops(
    dtype: str = "float32",
    n: int = 1024,
    repeats: int = 5,
    device: Any = "auto",
    *,
    tf32: bool = False,
) -> float:
    """Best observed GFLOP/s of an ``n x n`` PyTorch matmul (``float32``, ``bfloat16`` or ``float16``).

    One untimed warm-up call, then ``repeats`` synchronised calls; the fastest one counts.
    ``float32`` runs in IEEE float32 (TF32 off, :func:`helpers.core.precision.strict_fp32`) unless
    ``tf32=True``, which allows TF32 for the product (a CUDA GPU only; on one without TF32 tensor
    cores, or with ``NVIDIA_TF32_OVERRIDE=0``, the product still runs in float32). PyTorch's TF32
    settings are restored afterwards.
    """
    import torch

    from helpers.core.environment import torch_device

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 16:
        raise ValueError(f"n must be an int >= 16, got {n!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    dev = device if isinstance(device, torch.device) else torch_device(str(device))
    if dev.type == "cpu" and dtype == "float16":
        raise ValueError("float16 matmul is not a meaningful CPU peak; use bfloat16 on CPU")
    if tf32 and (dtype != "float32" or dev.type != "cuda"):
        raise ValueError("tf32=True is for float32 matrices on a CUDA GPU")
    a = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
    b = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    before = precision.set_tf32(tf32)
    try:
        with torch.inference_mode():
            times = time_loop(lambda: a @ b, warmup=1, repeats=repeats, sync=sync)
    finally:
        precision.restore_tf32(before)
    best = min(times)  # the peak: the best call, not the typical one
    return 2 * n**3 / best / 1e9


def ceilings(device: Any = "auto", n: int = 1024, repeats: int = 5) -> dict[str, float]:
    """The matmul peak (GFLOP/s) of each math mode ``device`` offers, keyed by mode.

    On a CPU: 'fp32' and 'bf16'. On a CUDA GPU: 'fp32' (TF32 off), 'tf32' where the GPU has TF32
    tensor cores and ``NVIDIA_TF32_OVERRIDE`` does not forbid them (read with
    :func:`helpers.core.precision.torch_math_mode` while TF32 is allowed), 'bf16' where PyTorch
    supports it on the GPU, and 'fp16'. Pick the ceiling of the mode a model runs in with
    ``ceilings(...)[precision.torch_math_mode(device)]``.
    """
    import torch

    from helpers.core.environment import torch_device

    dev = device if isinstance(device, torch.device) else torch_device(str(device))
    peaks = {"fp32": matmul_peak_gflops("float32", n, repeats, dev)}
    if dev.type == "cuda":
        before = precision.set_tf32(True)
        try:
            tf32_in_effect = precision.torch_math_mode(dev, op="matmul") == "tf32"
        finally:
            precision.restore_tf32(before)
        if tf32_in_effect:
            peaks["tf32"] = matmul_peak_gflops("float32", n, repeats, dev, tf32=True)
        if _native_bf16(torch):
            peaks["bf16"] = matmul_peak_gflops("bfloat16", n, repeats, dev)
        peaks["fp16"] = matmul_peak_gflops("float16", n, repeats, dev)
    else:
        peaks["bf16"] = matmul_peak_gflops("bfloat16", n, repeats, dev)
    return peaks


def _native_bf16(torch: Any) -> bool:
    """Whether the GPU multiplies bfloat16 natively (Ampere+), not by emulation."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # PyTorch < 2.3: no emulation argument
        return bool(torch.cuda.is_bf16_supported())


def count_flops(model: Any, example_input: Any) -> int:
    """Floating-point operations of one forward pass of a PyTorch model (``torch.utils.flop_counter``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            "count_flops needs a torch.nn.Module (count OneFlow models through their PyTorch twin)"
        )
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        model(example_input)
    return int(counter.get_total_flops())


def percent_of_peak(flops: float, seconds: float, peak_gflops: float) -> float:
    """Achieved share of the peak, in percent, for ``flops`` done in ``seconds``."""
    if seconds <= 0 or peak_gflops <= 0:
        raise ValueError("seconds and peak_gflops must be positive")
    return 100.0 * flops / seconds / 1e9 / peak_gflops
