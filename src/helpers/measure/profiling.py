"""Where the time goes: PyTorch profiler tables and peak tensor memory.

OneFlow's profiler aborts the process on machines without a GPU (OneFlow 0.9.0, CUDA build), so
profile the PyTorch twin of a model; the op mix is the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

__all__ = ["table_rows", "task_peak_memory"]


def table_rows(
    text: str, columns: Sequence[str], *, optional: Sequence[str] = ()
) -> list[dict[str, str]]:
    """The rows of a ``torch.profiler`` text table (``prof.key_averages().table(...)``) as dicts.

    The profiler's table is ~140 characters wide, wider than a page: keep the ``columns`` a page
    reads (by header), plus each of ``optional`` the table has (``Self CUDA Mem``
    only appears when some operator allocated device memory). Rows and columns stay in the
    table's order, cells its text (``"1.307s"``); columns are cut at the rule of dashes.
    """
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and not line.strip(" -")]
    if len(rules) < 3:
        raise ValueError("not a torch.profiler table: it needs a header between rules of dashes")
    spans = [m.span() for m in re.finditer(r"-+", lines[rules[0]])]

    def cut(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    header = cut(lines[rules[0] + 1])
    wanted = list(columns)
    unknown = [c for c in wanted if c not in header]
    if unknown:
        raise KeyError(f"no column {unknown} in the profiler table; it has {header}")
    wanted += [c for c in optional if c in header]
    keep = [c for c in header if c in wanted]
    body = [cut(line) for line in lines[rules[1] + 1 : rules[2]] if line.strip()]
    return [{c: row[header.index(c)] for c in keep} for row in body]


def task_peak_memory(task: Any, x: Any, device: Any = "cpu") -> dict[str, Any]:
    """Peak *extra* tensor bytes of one call ``task(x)`` of a PyTorch ``make_task`` task.

    After one warm-up call, the gradients it left are dropped (``zero_grad`` sets them to None),
    so ``retained`` is what the measured call itself leaves (e.g. weight gradients). CUDA: the
    caching allocator's peak counter; CPU: the running maximum of ``torch.profiler``'s allocation
    and free events. Memory held before the call is not counted.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    module = getattr(task, "module", None)
    if not isinstance(module, torch.nn.Module):
        raise TypeError("task_peak_memory needs a PyTorch task made by make_task")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"peak memory is measured on 'cpu' or 'cuda', got {device.type!r}")
    task(x)
    module.zero_grad()
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        task(x)
        torch.cuda.synchronize()
        return {
            "peak": int(torch.cuda.max_memory_allocated() - base),
            "retained": int(torch.cuda.memory_allocated() - base),
            "method": "CUDA caching allocator",
        }
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        task(x)
    cpu = torch.autograd.DeviceType.CPU
    events = [e for e in prof.profiler.kineto_results.events() if e.device_type() == cpu]
    events = sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns())
    held = list(accumulate((e.nbytes() for e in events), initial=0))
    return {"peak": max(held), "retained": held[-1], "method": "torch.profiler allocation events"}
