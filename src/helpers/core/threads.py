"""How many CPU threads each framework computes with, set alike for a fair comparison.

PyTorch, OneFlow, ONNX Runtime and OpenVINO each pick their own thread count by default, and a
comparison in which one framework has twice the cores of the other measures the cores, not the
framework: :func:`same_threads` gives them one count.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.core import cgroup
from helpers.core.checks import check_int
from helpers.core.environment import native_output

__all__ = [
    "affinity",
    "available_cores",
    "same_threads",
    "framework_threads",
    "torch_threads",
    "WAIT_POLICY_ENV",
    "threads_spin",
]

# How idle worker threads wait. GNU OpenMP (PyTorch's CPU threads) reads it once, when it starts:
# ACTIVE or unset, a thread that finished its share spins for a while before it sleeps, which helps
# back-to-back calls of one framework and steals the cores from anything else that runs then (an
# ONNX Runtime session timed in the next round, a Triton server, a second pipeline process).
# `make` and the course's kernel set PASSIVE; the ONNX Runtime sessions the course opens follow
# the same policy (threads_spin()), so no framework is timed against another's spinning threads.
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"

ONEFLOW_THREADS_ENV = "ONEFLOW_EP_CPU_NUM_PARALLELS"  # OneFlow's CPU threads, read at its start


def affinity() -> set[int]:
    """The CPUs this process may run on: its affinity mask (every CPU off Linux)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return set(range(os.cpu_count() or 1))


def available_cores(cgroup_root: Path | str = cgroup.ROOT, self_cgroup: str | None = None) -> int:
    """CPUs this process may compute on: its affinity mask (``os.cpu_count()`` off Linux), capped
    by its container's CPU quota where the cgroup sets one (a container limited to 4 CPUs' worth
    of time on a 64-core host sees all 64 in its mask: 4 threads, not 64, is what it can run
    without being throttled). A fractional quota rounds down, to at least one."""
    mask = len(affinity())
    quota = cgroup.cpu_quota(cgroup.find(cgroup_root, self_cgroup))
    return mask if quota is None else max(1, min(mask, math.floor(quota)))


def same_threads(n: int | None = None) -> int:
    """Give every framework of a comparison the same ``n`` CPU threads (default: every core); return ``n``.

    Sets PyTorch (``torch.set_num_threads``) and OneFlow (``ONEFLOW_EP_CPU_NUM_PARALLELS`` for a
    OneFlow not started yet, fresh processes included, and ``oneflow.set_num_threads`` for one
    already imported). ONNX Runtime and OpenVINO take threads per session (``threads=`` in
    ``helpers.deploy.runtimes``). Setting threads is a request: each measurement records the cores
    the framework really used (``Measurement.cores_used``).
    """
    n = check_int("threads", available_cores() if n is None else n)
    os.environ[ONEFLOW_THREADS_ENV] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    flow = sys.modules.get("oneflow")
    # OneFlow prints a misleading warning when n equals the CPU count (which it then uses, as
    # asked): only smaller counts are passed, with its output hidden
    if flow is not None and hasattr(flow, "set_num_threads") and n < (os.cpu_count() or 1):
        with native_output(1):  # its std::cout, captured and dropped
            flow.set_num_threads(n)
    return n


def framework_threads(framework: str) -> int | None:
    """Threads ``framework`` computes with on a CPU, as set (None when this module cannot tell).

    PyTorch: ``torch.get_num_threads()``. OneFlow 0.9.0 has no getter: ``$ONEFLOW_EP_CPU_NUM_PARALLELS``
    (:func:`same_threads` sets it), else its default, the CPUs minus two, at least one
    (``oneflow/core/ep/cpu/cpu_device_manager.cpp``). ONNX Runtime and OpenVINO take theirs per
    session: the caller passes ``threads=``.
    """
    if framework == "torch":
        torch = sys.modules.get("torch")
        return torch.get_num_threads() if torch is not None else None
    if framework == "oneflow":
        value = os.environ.get(ONEFLOW_THREADS_ENV, "").strip()
        return (
            int(value) if value.isdigit() and int(value) > 0 else max(1, (os.cpu_count() or 1) - 2)
        )
    return None


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with PyTorch's intra-op thread count set to ``n`` (None: unchanged), then restore it."""
    import torch

    saved = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(check_int("threads", n))
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def threads_spin() -> bool:
    """Whether idle worker threads should spin: False when ``OMP_WAIT_POLICY=PASSIVE``. PyTorch's
    OpenMP threads read the variable; the course's ONNX Runtime sessions follow this answer."""
    return os.environ.get(WAIT_POLICY_ENV, "").strip().upper() != "PASSIVE"
