"""Where the time goes: per-stage timing of a pipeline, PyTorch profiler tables, peak tensor memory.

Plumbing shared by chapters 0, 4, 5 and 7 (and :mod:`helpers.workload.saliency`). OneFlow's
profiler aborts the process on machines without a GPU (OneFlow 0.9.0, CUDA build), so profile
the PyTorch twin of a model; the op mix is the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from helpers.core.benchmarking import Measurement, benchmark

__all__ = ["time_stages", "torch_profile", "torch_peak_memory"]


def time_stages(
    stages: Mapping[str, Callable[[], Any]],
    *,
    framework: str = "torch",
    warmup: int = 2,
    repeats: int = 10,
) -> dict[str, Measurement]:
    """Benchmark each stage of a pipeline separately (same warm-up and repetitions for all)."""
    if not stages:
        raise ValueError("no stages given")
    return {
        name: benchmark(fn, label=name, framework=framework, warmup=warmup, repeats=repeats)
        for name, fn in stages.items()
    }


def torch_profile(
    fn: Callable[[], Any],
    *,
    row_limit: int = 10,
    sort_by: str = "self_cpu_time_total",
    memory: bool = True,
    warmup: int = 1,
) -> tuple[str, list[dict[str, Any]]]:
    """Run ``fn`` once under ``torch.profiler`` (after ``warmup`` calls); return the op table and its rows.

    Rows hold the op name, calls, self CPU time (ms) and self CPU memory (MiB) when ``memory``.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if row_limit < 1:
        raise ValueError("row_limit must be >= 1")
    # Kineto logs a scary "gpuGetDeviceCount failed" on GPU-less machines; keep only its errors that matter.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, profile_memory=memory, record_shapes=False) as prof:
        fn()
    averages = prof.key_averages()
    table = averages.table(sort_by=sort_by, row_limit=row_limit)
    rows = sorted(
        (
            {
                "op": e.key,
                "calls": e.count,
                "self_cpu_ms": e.self_cpu_time_total / 1e3,
                "self_cpu_mem_mib": getattr(e, "self_cpu_memory_usage", 0) / 2**20,
            }
            for e in averages
        ),
        key=lambda r: -r["self_cpu_ms"],
    )
    return table, rows[:row_limit]


def torch_peak_memory(
    fn: Callable[[], Any],
    *,
    device: Any = "cpu",
    warmup: int = 1,
    setup: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Peak *extra* tensor memory allocated while ``fn()`` runs once (after ``warmup`` calls), in bytes.

    ``setup()`` runs after the warm-up, just before the measured call, outside the measurement
    (e.g. to drop gradients a previous call left, so the call starts from a clean state).

    On CUDA it reads the caching allocator's peak counter; on CPU it replays the allocation and
    free events recorded by ``torch.profiler`` (``profile_memory=True``) and takes the running
    maximum. Memory held before the call (weights, earlier results) is not counted; ``retained``
    is what the call left allocated (e.g. parameter ``.grad`` tensors).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"peak memory is measured on 'cpu' or 'cuda', got {device.type!r}")
    for _ in range(warmup):
        fn()
    if setup is not None:
        setup()
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return {
            "peak": int(torch.cuda.max_memory_allocated() - base),
            "retained": int(torch.cuda.memory_allocated() - base),
            "method": "CUDA caching allocator",
        }
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (
            e
            for e in prof.profiler.kineto_results.events()
            if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
        ),
        key=lambda e: e.start_ns(),
    )
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return {
        "peak": int(peak),
        "retained": int(current),
        "method": "torch.profiler allocation events",
    }
