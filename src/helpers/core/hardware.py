"""What this machine is: its CPU (model, generation, the instruction sets that decide its speeds),
cores, memory and GPU. :func:`machine_facts` is the one shape in which the ledger, the Time
lines, the full-size tables and the CPU benchmark record a machine (the ledger adds the GPU's
``driver`` and ``cuda``); :func:`describe_machine` puts it in words. Older records spelt
``flags`` as ``cpu_features``; both are read.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

from helpers.core import cgroup

__all__ = [
    "has_int8_dot_product",
    "has_bf16_instructions",
    "int8_saturates",
    "gpu_properties",
    "gpu_info",
    "host_memory",
    "machine_facts",
    "describe_machine",
    "same_machine",
]

# The CPU flags that decide the course's CPU speeds (vector width, int8 and bf16 instructions).
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def _cpuinfo() -> dict[str, str]:
    """The first processor's block of ``/proc/cpuinfo`` as {key: value}; {} off Linux."""
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip() and found:
                    break
                key, _, value = line.partition(":")
                found.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return found


def _cpu_flags() -> set[str]:
    return set(_cpuinfo().get("flags", "").split())


def has_int8_dot_product() -> bool:
    """Whether this CPU has 8-bit dot-product instructions (AVX-512 VNNI, AVX-VNNI, AMX-INT8)."""
    return bool(_cpu_flags() & INT8_DOT_FLAGS)


def has_bf16_instructions() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX-512 BF16 or AMX-BF16); elsewhere
    PyTorch emulates it, slowly."""
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


def int8_saturates() -> bool:
    """True on an x86 CPU without 8-bit dot-product instructions: there ONNX Runtime's int8
    kernels add pairs of 8-bit products into 16 bits (``vpmaddubsw``), which can overflow,
    with unsigned and with signed activations alike; 7-bit weights (``reduce_range``) keep each
    pair in range (ONNX Runtime's quantization guide)."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return x86 and not has_int8_dot_product()


def gpu_properties() -> Any | None:
    """PyTorch's properties of CUDA device 0 (``name``, ``total_memory``...); None without one."""
    from helpers.core.environment import has_cuda

    if not has_cuda():
        return None
    import torch

    return torch.cuda.get_device_properties(0)


def gpu_info() -> dict[str, Any]:
    """``{"gpu": "NVIDIA H200 (141 GiB)", "driver": ..., "cuda": ...}``; all None without one."""
    props = gpu_properties()
    if props is None:
        return {"gpu": None, "driver": None, "cuda": None}
    import subprocess

    import torch

    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False)
        driver = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        driver = None
    return {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB)",
        "driver": driver,
        "cuda": torch.version.cuda,
    }


def host_memory(
    meminfo: str | None = None,
    cgroup_root: Path | str = cgroup.ROOT,
    self_cgroup: str | None = None,
) -> tuple[int | None, str]:
    """(bytes, where they were read): the machine's ``MemTotal``, or its container's memory limit
    where the cgroup sets a lower one (a container sees the host's ``/proc/meminfo``). None off
    Linux. ``meminfo``, ``cgroup_root`` and ``self_cgroup`` replace the real files (tests)."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            meminfo = ""
    rows = [line.split() for line in meminfo.splitlines() if line.startswith("MemTotal:")]
    total = int(rows[0][1]) * 1024 if rows else None
    limit = cgroup.memory_limit(cgroup.find(cgroup_root, self_cgroup))
    if limit is not None and (total is None or limit < total):
        return limit, "the container's cgroup limit"
    return total, "MemTotal"


@lru_cache(maxsize=1)
def machine_facts() -> dict[str, Any]:
    """This machine, as every record of where a figure was measured stores it."""
    memory, _ = host_memory()  # the container's limit where it is lower than the host's RAM
    info = _cpuinfo()
    # the family and model tell generations of one model name apart ("AMD EPYC"): cloud machines
    # of one name differ by more than 1.5x
    family = info.get("cpu family")
    return {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": f"family {family}, model {info.get('model', '?')}" if family else None,
        "cores": os.cpu_count(),
        "flags": sorted(_cpu_flags() & set(FLAGS)),
        "memory_gib": round(memory / 2**30, 1) if memory else None,
        "gpu": gpu_info()["gpu"],
    }


def _flags(m: dict[str, Any]) -> list[str]:
    return list(m.get("flags", m.get("cpu_features")) or ())


def describe_machine(m: dict[str, Any] | None = None, *, memory: bool = False) -> str:
    """``"AMD EPYC (family 25, model 1), 2 cores, AVX2"``: the CPU behind a figure, with its
    family where it was recorded and its widest vector extension; ``memory`` adds the RAM, and a
    recorded GPU is named last. Default: this machine."""
    m = machine_facts() if m is None else m
    flags = set(_flags(m))
    vectors = (("avx512_vnni", "AVX-512 VNNI"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
    widest = next((label for flag, label in vectors if flag in flags), None)  # the widest only
    named = [n for n in (widest, "AMX" if "amx_int8" in flags else None) if n]
    family = f" ({m['cpu_family']})" if m.get("cpu_family") else ""
    parts = [m["cpu"] + family, f"{m['cores']} cores", *named]
    if memory and m.get("memory_gib"):
        parts.append(f"{m['memory_gib']} GiB")
    if m.get("gpu"):
        parts.append(m["gpu"])
    return ", ".join(parts)


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two recorded machines are one CPU: model, family, cores and flags."""

    def key(m: dict[str, Any]) -> tuple[Any, ...]:
        return m["cpu"], m.get("cpu_family") or "", m["cores"], tuple(sorted(_flags(m)))

    return key(a) == key(b)
