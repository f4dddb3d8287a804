"""Where the time goes: per-stage timing of a pipeline, PyTorch profiler tables, peak tensor memory.

Plumbing shared by chapters 0, 4, 5 and 7 (and :mod:`helpers.workload.saliency`);
:func:`table_rows` narrows the profiler's own text table to the columns a page shows. OneFlow's
profiler aborts the process on machines without a GPU (OneFlow 0.9.0, CUDA build), so profile
the PyTorch twin of a model; the op mix is the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from helpers.measure.measurement import Measurement
from helpers.measure.timer import benchmark

__all__ = [
    "DEVICE_SORT_KEYS",
    "CPU_SORT_KEY",
    "time_stages",
    "torch_profile",
    "table_rows",
    "torch_peak_memory",
    "task_peak_memory",
]


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


# Sort keys of torch.profiler's tables that rank by time on the device (the GPU) rather than on the
# CPU; PyTorch >= 2.4 names it "device", older versions "cuda" (the table accepts both spellings).
DEVICE_SORT_KEYS = ("self_device_time_total", "self_cuda_time_total")
CPU_SORT_KEY = "self_cpu_time_total"


def _self_device_us(event: Any) -> float:
    """An averaged profiler event's self time on the device, in microseconds (0 without one)."""
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, attr, None)
        if value is not None:
            return float(value)
    return 0.0


def torch_profile(
    fn: Callable[[], Any],
    *,
    row_limit: int = 10,
    sort_by: str = CPU_SORT_KEY,
    memory: bool = True,
    warmup: int = 1,
) -> tuple[str, list[dict[str, Any]]]:
    """Run ``fn`` once under ``torch.profiler`` (after ``warmup`` calls); return the op table and its rows.

    ``sort_by``: ``"self_cpu_time_total"`` (default) ranks operators by the CPU time they spent
    themselves, the right clock on a CPU; ``"self_device_time_total"`` (or ``"self_cuda_time_total"``)
    by the time their kernels took on the GPU, the right clock for a model on a GPU, whose CPU side
    only launches kernels (there the launches and the profiler's final synchronisation would top a
    CPU-time table). With a GPU, ``fn`` is followed by ``torch.cuda.synchronize()`` inside the
    profiled region, so every kernel of the call is recorded.

    Rows are the operators (``aten::...``, run on the CPU; the GPU kernels they launched appear in
    the table but not as rows, their time counts in the operator's ``self_device_ms``), sorted by
    the same key as the table: op name, calls, ``self_cpu_ms``, ``self_device_ms`` (0 without a
    GPU), ``self_cpu_mem_mib`` (0 unless ``memory``) and ``ranked_by`` ('device' or 'cpu').
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if row_limit < 1:
        raise ValueError("row_limit must be >= 1")
    cuda = torch.cuda.is_available()
    by_device = sort_by in DEVICE_SORT_KEYS
    if by_device and not cuda:
        raise ValueError(
            f"sort_by={sort_by!r} ranks by GPU time, but PyTorch sees no CUDA GPU: "
            f"use {CPU_SORT_KEY!r}"
        )
    # Kineto logs a scary "gpuGetDeviceCount failed" on GPU-less machines; keep only its errors that matter.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()  # the warm-up's kernels stay out of the profile
    with profile(activities=activities, profile_memory=memory, record_shapes=False) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()  # every kernel of the call finishes inside the profile
    averages = prof.key_averages()
    # PyTorch >= 2.4 reads "cuda" in a sort key as "device"; older versions know only "cuda".
    table = averages.table(
        sort_by="self_cuda_time_total" if by_device else sort_by, row_limit=row_limit
    )
    cpu_type = torch.autograd.DeviceType.CPU
    rows = [
        {
            "op": e.key,
            "calls": e.count,
            "self_cpu_ms": e.self_cpu_time_total / 1e3,
            "self_device_ms": _self_device_us(e) / 1e3,
            "self_cpu_mem_mib": getattr(e, "self_cpu_memory_usage", 0) / 2**20,
            "ranked_by": "device" if by_device else "cpu",
        }
        for e in averages
        if getattr(e, "device_type", cpu_type) == cpu_type  # operators, not GPU kernels
    ]
    key = "self_device_ms" if by_device else "self_cpu_ms"
    rows.sort(key=lambda r: -r[key])
    return table, rows[:row_limit]


def table_rows(
    text: str, columns: Sequence[str] | None = None, *, optional: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The rows of a ``torch.profiler`` text table (``prof.key_averages().table(...)``) as dicts.

    The profiler's own table is about 140 characters wide, wider than a book's page; a chapter
    keeps the ``columns`` it reads (by their header, e.g. ``["Name", "Self CPU", "# of Calls"]``;
    all of them when None) and shows them as a :class:`helpers.show.Table`, in the table's own
    order (its ``sort_by``). Cells stay the profiler's text (``"1.307s"``, ``"536.00 KB"``).
    Columns are cut at the table's rule of dashes, so names with spaces stay whole. A column of
    ``optional`` is kept where the table has it (the profiler prints ``Self CUDA Mem`` only when
    some operator allocated device memory); the columns come in the table's own order.
    """
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and not line.strip(" -")]
    if len(rules) < 3:
        raise ValueError("not a torch.profiler table: it needs a header between rules of dashes")
    spans = [m.span() for m in re.finditer(r"-+", lines[rules[0]])]

    def cut(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    header = cut(lines[rules[0] + 1])
    wanted = list(header if columns is None else columns)
    unknown = [c for c in wanted if c not in header]
    if unknown:
        raise KeyError(f"no column {unknown} in the profiler table; it has {header}")
    wanted += [c for c in optional if c in header]
    keep = [c for c in header if c in wanted]
    body = [cut(line) for line in lines[rules[1] + 1 : rules[2]] if line.strip()]
    return [{c: row[header.index(c)] for c in keep} for row in body]


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


def task_peak_memory(task: Any, x: Any, device: Any = "cpu") -> dict[str, Any]:
    """Peak extra tensor memory of one call of a PyTorch ``make_task`` task (see :func:`torch_peak_memory`).

    Gradients left by earlier calls are dropped first, so each variant is measured from the same
    clean state and ``retained`` shows the weight gradients a variant leaves behind.
    """
    import torch

    module = getattr(task, "module", None)
    if not isinstance(module, torch.nn.Module):
        raise TypeError("task_peak_memory needs a PyTorch task made by make_task")

    def drop_grads() -> None:
        for param in module.parameters():
            param.grad = None

    return torch_peak_memory(lambda: task(x), device=device, setup=drop_grads)
