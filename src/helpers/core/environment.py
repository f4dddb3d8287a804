"""Quick/full mode, device selection, seeding and the environment report.

One environment variable, ``COURSE_MODE`` (``quick`` or ``full``), picks the
problem sizes of every chapter.  Without it, the mode is ``full`` on a machine
with a CUDA GPU and ``quick`` otherwise.  The same code path runs in both modes.
"""

from __future__ import annotations

import os
import platform
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from importlib import metadata
from typing import Any

__all__ = [
    "MODE_ENV",
    "MODES",
    "Sizes",
    "SIZES",
    "get_mode",
    "sizes",
    "has_cuda",
    "torch_device",
    "flow_device",
    "paired_devices",
    "quiet_native_stderr",
    "import_oneflow",
    "ONEFLOW_THREADS_ENV",
    "available_cores",
    "oneflow_threads",
    "same_threads",
    "oneflow_blas",
    "AVX2_BLAS_CORES",
    "seed_everything",
    "skip_without_gpu",
    "LIBRARIES",
    "environment_report",
    "machine_label",
    "print_environment_report",
]

MODE_ENV = "COURSE_MODE"
MODES = ("quick", "full")


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one mode; every chapter reads its sizes from here."""

    mode: str
    arch: str  # the ResNet of case study 1 (a smaller sibling in quick mode)
    image_size: int  # height = width of network inputs
    batch_size: int  # the "batch 16" of the case study
    batch_sweep: tuple[int, ...]  # batch sizes for sweeps
    warmup: int  # warm-up calls before timing
    repeats: int  # timed calls per measurement
    num_classes: int  # classes of the generated dataset
    train_images: int  # generated training images
    val_images: int  # generated held-out images
    train_steps: int  # optimisation steps for training demos
    embed_dim: int  # MobileNetV2 embedder output size
    embed_width: float  # MobileNetV2 width multiplier


SIZES: dict[str, Sizes] = {
    "quick": Sizes(
        mode="quick",
        arch="resnet18",
        image_size=64,
        batch_size=8,
        batch_sweep=(1, 2, 4, 8, 16),
        warmup=3,
        repeats=10,
        num_classes=8,
        train_images=1024,
        val_images=256,
        train_steps=60,
        embed_dim=128,
        embed_width=0.5,
    ),
    "full": Sizes(
        mode="full",
        arch="resnet101",
        image_size=224,
        batch_size=16,
        batch_sweep=(1, 2, 4, 8, 16, 32, 64),
        warmup=20,
        repeats=50,
        num_classes=8,
        train_images=4096,
        val_images=1024,
        train_steps=300,
        embed_dim=512,
        embed_width=1.0,
    ),
}


def get_mode() -> str:
    """Return the course mode: ``$COURSE_MODE`` if set, else ``full`` with a GPU and ``quick`` without."""
    value = os.environ.get(MODE_ENV, "").strip().lower()
    if not value:
        return "full" if has_cuda() else "quick"
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r} is not a known mode; use one of {', '.join(MODES)}")
    return value


def sizes(mode: str | None = None) -> Sizes:
    """Problem sizes for ``mode`` (default: the current mode)."""
    mode = get_mode() if mode is None else mode
    if mode not in SIZES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return SIZES[mode]


@lru_cache(maxsize=1)
def has_cuda() -> bool:
    """True when PyTorch sees a usable CUDA GPU."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA stack means "no GPU" here
        return False


def _check_device_name(name: str) -> str:
    name = name.strip().lower()
    if name not in ("auto", "cpu", "cuda") and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {name!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return name


def torch_device(name: str = "auto") -> Any:
    """A ``torch.device``: ``auto`` picks CUDA when present and falls back to CPU.

    Asking explicitly for ``cuda`` on a machine without a GPU raises a clear error.
    """
    import torch

    name = _check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if has_cuda() else "cpu")
    if name.startswith("cuda") and not has_cuda():
        raise RuntimeError(
            f"device {name!r} requested but PyTorch sees no CUDA GPU; use 'cpu' or 'auto'"
        )
    return torch.device(name)


def flow_device(name: str = "auto") -> Any:
    """A ``oneflow.device`` with the same rules as :func:`torch_device`.

    OneFlow 0.9.0 has no code for GPUs newer than compute capability 8.x (H100/H200 and later):
    there ``auto`` picks the CPU and prints why once, and an explicit ``cuda`` raises the reason.
    """
    flow = import_oneflow()
    name = _check_device_name(name)
    cuda = bool(flow.cuda.is_available())
    problem = _oneflow_gpu_problem() if cuda else None
    if name == "auto":
        if problem:
            _say_once(problem)
        return flow.device("cuda" if cuda and not problem else "cpu")
    if name.startswith("cuda") and not cuda:
        raise RuntimeError(
            f"device {name!r} requested but OneFlow sees no CUDA GPU; use 'cpu' or 'auto'"
        )
    if name.startswith("cuda") and problem:
        raise RuntimeError(problem)
    return flow.device(name)


def paired_devices() -> tuple[Any, Any]:
    """``(torch.device, oneflow.device)`` of the same kind, for chapters that compare the two frameworks.

    Both CUDA when OneFlow can use the GPU, otherwise both CPU (printing why), so that a
    PyTorch-vs-OneFlow difference is never a GPU-vs-CPU difference."""
    fdev = flow_device()
    return torch_device(fdev.type), fdev


@lru_cache(maxsize=1)
def _oneflow_gpu_problem() -> str | None:
    from helpers.core.cuda_compat import oneflow_gpu_problem

    return oneflow_gpu_problem()


@cache
def _say_once(message: str) -> None:
    print(f"NOTE: {message}")


_HARMLESS = ("libibverbs not available", "CUDA driver version is insufficient", "gpuGetDeviceCount")


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Hide OneFlow's harmless 'no CUDA driver' lines that its C++ runtime writes to file descriptor 2.

    They appear at import and again when the first ``nn.Graph`` compiles on a CPU-only machine.
    Every other line written to descriptor 2 inside the block is passed on unchanged (after it).
    """
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
    for line in text.splitlines():
        if line.strip() and not any(h in line for h in _HARMLESS):
            print(line, file=sys.stderr)


def import_oneflow() -> Any:
    """Import OneFlow once, hiding its harmless 'no CUDA driver' chatter on CPU-only machines.

    OneFlow's C++ runtime writes those lines straight to file descriptor 2 at import; any
    other line it writes there is passed on unchanged. First it loads the course's fix for a race
    in OneFlow 0.9.0's ``nn.Graph`` launcher (:mod:`helpers.core.oneflow_fix`), which would
    otherwise crash a process now and then; without it (no C++ compiler) a note says so once.
    """
    if "oneflow" in sys.modules:
        return sys.modules["oneflow"]
    from helpers.core import oneflow_fix

    fix = oneflow_fix.install()
    if not fix["loaded"] and "COURSE_ONEFLOW_FIX=0" not in fix["reason"]:
        _say_once(
            f"the fix for OneFlow 0.9.0's nn.Graph launch race is not loaded ({fix['reason']}): "
            "a graph call may crash the process now and then (helpers/core/oneflow_fix.py)"
        )
    with quiet_native_stderr():
        import oneflow
    return oneflow


ONEFLOW_THREADS_ENV = "ONEFLOW_EP_CPU_NUM_PARALLELS"  # OneFlow's CPU threads, read at its start
_flow_threads: int | None = None  # what same_threads gave OneFlow in this process


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def oneflow_threads() -> int:
    """OneFlow's CPU threads in this process: as :func:`same_threads` set them, else as it starts.

    OneFlow 0.9.0 has no getter. Without a setting its CPU device uses the machine's hardware
    threads minus two, at least one (``oneflow/core/ep/cpu/cpu_device_manager.cpp``), or
    ``$ONEFLOW_EP_CPU_NUM_PARALLELS`` when set before OneFlow starts.
    """
    if _flow_threads is not None:
        return _flow_threads
    value = os.environ.get(ONEFLOW_THREADS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, (os.cpu_count() or 1) - 2)


def same_threads(n: int | None = None) -> int:
    """Give every framework of a comparison the same ``n`` CPU threads (default: every core); return ``n``.

    Sets PyTorch (``torch.set_num_threads``) and OneFlow (``ONEFLOW_EP_CPU_NUM_PARALLELS`` for a
    OneFlow not started yet, fresh processes included, and ``oneflow.set_num_threads`` for one
    already imported). ONNX Runtime and OpenVINO take threads per session: pass the returned
    number as ``intra_op_num_threads`` / ``INFERENCE_NUM_THREADS`` (``helpers.deploy.runtimes``
    takes it as ``threads``). Setting threads is a request: each measurement records the cores the
    framework really used (``Measurement.cores_used``).
    """
    global _flow_threads
    n = available_cores() if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    os.environ[ONEFLOW_THREADS_ENV] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    flow = sys.modules.get("oneflow")
    # OneFlow prints a misleading warning when n equals the CPU count (which it then uses, as
    # asked): only smaller counts are passed, with its output hidden
    if flow is not None and hasattr(flow, "set_num_threads") and n < (os.cpu_count() or 1):
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            flow.set_num_threads(n)
        finally:
            import ctypes

            ctypes.CDLL(None).fflush(None)  # C stdio's buffer (std::cout) while still silenced
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
    _flow_threads = n
    return n


# OpenBLAS kernel families, newest first, that OneFlow 0.9.0's bundled OpenBLAS may pick at start-up.
_BLAS_CORES = (
    "SKYLAKEX",
    "COOPERLAKE",
    "ZEN",
    "HASWELL",
    "EXCAVATOR",
    "STEAMROLLER",
    "PILEDRIVER",
    "BULLDOZER",
    "SANDYBRIDGE",
    "NEHALEM",
    "BARCELONA",
    "PENRYN",
    "DUNNINGTON",
    "CORE2",
    "OPTERON_SSE3",
    "OPTERON",
    "ATOM",
    "NANO",
    "BOBCAT",
    "PRESCOTT",
)
AVX2_BLAS_CORES = frozenset({"SKYLAKEX", "COOPERLAKE", "ZEN", "HASWELL", "EXCAVATOR"})


def oneflow_blas() -> dict[str, Any]:
    """What computes OneFlow's CPU matrix products: the OpenBLAS inside ``liboneflow``, as loaded now.

    Returns the library file, whether that OpenBLAS was built with threads (a threaded build has
    ``exec_blas``), the threads it reports, and the kernel family it chose for this CPU at start-up
    (OpenBLAS's ``gotoblas`` pointer; ``$OPENBLAS_CORETYPE`` overrides the choice, read when
    OneFlow is imported). Linux wheels of OneFlow only; ``{"library": None}`` elsewhere.
    """
    import ctypes
    import glob
    from importlib.util import find_spec

    spec = find_spec("oneflow")
    if spec is None or spec.origin is None:
        return {"library": None, "why": "OneFlow is not installed"}
    libs = glob.glob(
        os.path.join(os.path.dirname(spec.origin), "..", "oneflow.libs", "liboneflow*")
    )
    if not libs:
        return {"library": None, "why": "no bundled liboneflow (not a Linux wheel)"}
    import_oneflow()  # OpenBLAS chooses its kernels when the library starts
    lib = ctypes.CDLL(libs[0])
    if not hasattr(lib, "cblas_sgemm"):
        return {"library": None, "why": "liboneflow exports no cblas_sgemm"}
    get_threads = lib.openblas_get_num_threads
    get_threads.restype = ctypes.c_int
    chosen = ctypes.c_void_p.in_dll(lib, "gotoblas").value
    kernels = "?"
    for core in _BLAS_CORES:
        try:
            if ctypes.addressof(ctypes.c_char.in_dll(lib, f"gotoblas_{core}")) == chosen:
                kernels = core
                break
        except ValueError:  # this build has no kernels for that family
            continue
    return {
        "library": "OpenBLAS (bundled in liboneflow)",
        "file": os.path.realpath(libs[0]),
        "threaded": hasattr(lib, "exec_blas"),
        "threads": int(get_threads()),
        "kernels": kernels,
        "avx2_kernels": kernels in AVX2_BLAS_CORES,
        "coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
    }


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy, PyTorch and (if imported) OneFlow."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass
    if "oneflow" in sys.modules:
        sys.modules["oneflow"].manual_seed(seed)


def skip_without_gpu(what: str) -> bool:
    """Print a clear skip line and return True when no CUDA GPU is present.

    Use as ``if not skip_without_gpu("TensorRT INT8"): ...`` so a GPU-only step never
    fails and never silently vanishes on a CPU machine.
    """
    if has_cuda():
        return False
    print(f"SKIPPED on this machine (no CUDA GPU): {what}. With a GPU this cell runs it for real.")
    return True


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _gpu_info() -> dict[str, Any]:
    if not has_cuda():
        return {"gpu": None, "driver": None, "cuda": None}
    import torch

    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        import subprocess

        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB)",
        "driver": driver,
        "cuda": torch.version.cuda,
    }


LIBRARIES = (
    "torch",
    "torchvision",
    "oneflow",
    "flowvision",
    "onnx",
    "onnxruntime-gpu",
    "openvino",
    "nvidia-pytriton",
    "numpy",
)


@lru_cache(maxsize=1)
def environment_report() -> dict[str, Any]:
    """Facts about this machine and its libraries (machine, cores, GPU, driver, versions, mode)."""
    flags = _cpu_flags()
    report: dict[str, Any] = {
        "mode": get_mode(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cpu_features": sorted(
            flags & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"}
        ),
    }
    report.update(_gpu_info())
    report["oneflow_gpu"] = (
        None if report["gpu"] is None else ("no: " + p if (p := _oneflow_gpu_problem()) else "yes")
    )
    report["libraries"] = {name: _version(name) for name in LIBRARIES}
    return report


def machine_label() -> str:
    """A short label for plots and ledger records, e.g. ``'2-core AMD EPYC 9xxx, no GPU (quick)'``."""
    rep = environment_report()
    gpu = rep["gpu"] or "no GPU"
    return f"{rep['cores']}-core {rep['cpu']}, {gpu} ({rep['mode']} mode)"


def print_environment_report() -> None:
    """Print the environment report and this mode's problem sizes (top of every chapter)."""
    rep = environment_report()
    width = 14
    for key in ("mode", "python", "os", "cpu", "cores", "cpu_features", "gpu", "driver", "cuda"):
        value = rep[key]
        if isinstance(value, list):
            value = ", ".join(value) or "-"
        print(f"{key:<{width}} {value if value is not None else '-'}")
    import textwrap

    def wrapped(key: str, text: str) -> None:
        lines = textwrap.wrap(text, 76) or ["-"]
        print(f"{key:<{width}} {lines[0]}")
        for line in lines[1:]:
            print(" " * (width + 1) + line)

    if rep.get("oneflow_gpu"):
        wrapped("oneflow gpu", rep["oneflow_gpu"])
    try:
        la = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        wrapped("load", f"{la} (1/5/15-minute load averages; each timing records its own load)")
    except OSError:
        pass
    wrapped("libraries", ", ".join(f"{k} {v}" for k, v in rep["libraries"].items() if v))
    s = asdict(sizes(rep["mode"]))
    wrapped("sizes", ", ".join(f"{k}={v}" for k, v in s.items() if k != "mode"))
    print(f"(set {MODE_ENV}=quick or {MODE_ENV}=full to choose the mode)")
