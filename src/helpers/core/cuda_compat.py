"""Which GPUs a framework's wheel can run on: the CUDA architectures compiled into its libraries.

A CUDA library carries machine code (SASS) for some GPU architectures, and optionally PTX the
driver compiles for newer ones. OneFlow 0.9.0's cu117 wheel has SASS for compute capability
6.0-8.6 and no PTX: it cannot run on Hopper (H100/H200, 9.0) or newer (PyTorch 2.10's cu128 wheel
starts at 7.0), so OneFlow needs a GPU of capability 7.0-8.9; elsewhere
``environment.flow_device`` keeps it on the CPU and says why. ``tests/core/test_cuda_compat.py``
re-reads the architectures (and the absence of PTX) from the installed library's fat binaries.
Standard library only at import: ``tools/doctor.py`` loads it before anything is installed.
"""

from __future__ import annotations

from functools import cache

__all__ = [
    "ONEFLOW_CUDA_ARCHS",
    "runs_on",
    "oneflow_gpu_problem",
]

# SASS architectures in oneflow-0.9.0+cu117's liboneflow (no PTX), read from its fat binaries.
ONEFLOW_CUDA_ARCHS: tuple[int, ...] = (60, 61, 70, 75, 80, 86)


def runs_on(capability: tuple[int, int], sass: tuple[int, ...]) -> bool:
    """Whether SASS built for ``sass`` (e.g. ``(70, 80, 86)``) runs on a GPU of ``capability``
    ``(major, minor)``: the same major version with an equal or higher minor (8.6 code runs on
    8.9, not on 9.0)."""
    major, minor = capability
    if major < 1 or minor < 0:
        raise ValueError(f"not a compute capability: {capability}")
    return any(a // 10 == major and a % 10 <= minor for a in sass)


@cache
def oneflow_gpu_problem() -> str | None:
    """Why OneFlow cannot use this machine's GPU, or None (it can, or there is no GPU at all)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        capability = torch.cuda.get_device_capability(0)
        name = torch.cuda.get_device_name(0)
    except Exception:  # no usable CUDA stack: nothing to warn about here
        return None
    if runs_on(capability, ONEFLOW_CUDA_ARCHS):
        return None
    archs = ", ".join(f"{a // 10}.{a % 10}" for a in ONEFLOW_CUDA_ARCHS)
    return (
        f"OneFlow 0.9.0 has no GPU code for the {name} (compute capability {capability[0]}.{capability[1]}); "
        f"its wheel is built for {archs}. OneFlow runs on the CPU here; PyTorch, ONNX Runtime and Triton "
        f"still use the GPU. For OneFlow on a GPU, use one of capability 7.0-8.9 (V100, T4, A100, A10G, L4, L40S)."
    )
