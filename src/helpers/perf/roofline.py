"""How close to the limit: this machine's matmul peak and a model's FLOPs (a roofline's two axes).

Why a module: measurement plumbing, like :mod:`helpers.core.benchmarking`. Only chapter 0 uses it,
but it holds instruments, not the lesson: a timed matrix product (timed by chapter 0's own
:func:`~helpers.core.benchmarking.time_loop`) and PyTorch's FLOP counter. The chapter's page
compares the two (the percent of peak).
"""

from __future__ import annotations

from typing import Any

from helpers.core.benchmarking import time_loop

__all__ = ["matmul_peak_gflops", "count_flops", "percent_of_peak"]


def matmul_peak_gflops(
    dtype: str = "float32", n: int = 1024, repeats: int = 5, device: str = "auto"
) -> float:
    """Best observed GFLOP/s of an ``n x n`` PyTorch matmul (``float32``, ``bfloat16`` or ``float16``).

    One untimed warm-up call, then ``repeats`` synchronised calls; the fastest one counts.
    """
    import torch

    from helpers.core.environment import torch_device

    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    if n < 16 or repeats < 1:
        raise ValueError("n must be >= 16 and repeats >= 1")
    dev = torch_device(device)
    if dev.type == "cpu" and dtype == "float16":
        raise ValueError("float16 matmul is not a meaningful CPU peak; use bfloat16 on CPU")
    a = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
    b = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    with torch.inference_mode():
        times = time_loop(lambda: a @ b, warmup=1, repeats=repeats, sync=sync)
    best = min(times)  # the peak: the best call, not the typical one
    return 2 * n**3 / best / 1e9


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
