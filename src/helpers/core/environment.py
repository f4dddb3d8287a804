"""Quick/full mode, device selection, seeding and the environment report.

``COURSE_MODE`` (``quick`` or ``full``) picks every chapter's problem sizes; unset, the mode is
what the machine can run (:func:`mode_choice`: ``full`` only where a CUDA GPU and the host's RAM
hold the heaviest chapter's measured need, :mod:`helpers.core.machine_needs`), said in one line.
``COURSE_FEWEST=1`` keeps the mode's sizes and cuts its repeats to the fewest that still run every
branch and assert (:func:`_fewest`); ``make fullcpu`` uses it to run full mode end to end on a CPU
(``tools/full_cpu_run.py``: about 75 minutes on two cores), and its timings are not reference
figures. The same code path runs in both modes.
"""

from __future__ import annotations

import os
import platform
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cache, lru_cache
from importlib import metadata
from typing import Any

from helpers.core import cgroup, cuda_compat, hardware, machine_needs
from helpers.core.checks import check_int

__all__ = [
    "MODE_ENV",
    "MODES",
    "fewest",
    "SIZES",
    "get_mode",
    "sizes",
    "sizes_on",
    "has_cuda",
    "torch_device",
    "flow_device",
    "paired_devices",
    "native_output",
    "quiet_native_stderr",
    "import_oneflow",
    "seed_everything",
    "skip_without_gpu",
    "environment_report",
    "machine_label",
    "print_environment_report",
    "PAGE_COLUMNS",
]

MODE_ENV = "COURSE_MODE"
MODES = ("quick", "full")
FEWEST_ENV = "COURSE_FEWEST"
# Your own classifier in every chapter's S.arch: a torchvision name, or package.module:function
# (helpers.workload.models.build_classifier builds it). `make ladder MODEL=...` sets it.
MODEL_ENV = "COURSE_MODEL"


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one mode; every chapter reads its sizes from here."""

    mode: str
    arch: str  # case study 1's ResNet (a smaller sibling in quick mode), or $COURSE_MODEL
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
    fewest: bool = False  # repeats cut by COURSE_FEWEST=1 (see fewest())

    def few(self, n: int, least: int = 3) -> int:
        """A page's own repeat count ``n``, cut like the others under ``COURSE_FEWEST=1``:
        a tenth of it, at least ``least`` (never more than ``n``). Unchanged otherwise."""
        return min(n, max(least, -(-n // 10))) if self.fewest else n


# fmt: off
SIZES: dict[str, Sizes] = {
    "quick": Sizes(
        "quick", arch="resnet18", image_size=64, batch_size=8, batch_sweep=(1, 2, 4, 8, 16),
        warmup=3, repeats=10, num_classes=8, train_images=1024, val_images=256,
        train_steps=60, embed_dim=128, embed_width=0.5,
    ),
    "full": Sizes(
        "full", arch="resnet101", image_size=224, batch_size=16,
        batch_sweep=(1, 2, 4, 8, 16, 32, 64), warmup=20, repeats=50, num_classes=8,
        train_images=4096, val_images=1024, train_steps=300, embed_dim=512, embed_width=1.0,
    ),
}
# fmt: on


def mode_choice() -> tuple[str, str]:
    """(mode, why): ``$COURSE_MODE`` when set, else what
    :func:`helpers.core.machine_needs.full_mode_fits` says of this GPU and RAM."""
    value = os.environ.get(MODE_ENV, "").strip().lower()
    if value not in ("", *MODES):
        raise ValueError(f"{MODE_ENV}={value!r} is not a known mode; use one of {', '.join(MODES)}")
    return (value, f"{MODE_ENV}={value}") if value else _auto_mode()


@lru_cache(maxsize=1)
def _auto_mode() -> tuple[str, str]:
    host, _ = hardware.host_memory()
    gpu = hardware.gpu_properties()
    fits, why = machine_needs.full_mode_fits(host, None if gpu is None else int(gpu.total_memory))
    return ("full" if fits else "quick"), why


def get_mode() -> str:
    """``$COURSE_MODE`` if set, else :func:`mode_choice`'s; a quick mode chosen here says why once."""
    mode, why = mode_choice()
    if mode == "quick" and not os.environ.get(MODE_ENV, "").strip():
        _say_once(f"quick mode: {why}. {MODE_ENV}=full runs full mode anyway")
    return mode


def fewest() -> bool:
    """True when ``$COURSE_FEWEST`` is ``1`` (``make fullcpu``); unset, empty or ``0``: False."""
    value = os.environ.get(FEWEST_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{FEWEST_ENV}={value!r}: use 1 (fewest repeats) or 0 (the mode's own)")
    return value == "1"


def _fewest(s: Sizes) -> Sizes:
    """``s`` with its repeat counts cut: one warm-up call, three timed calls (rounds, in the
    interleaved benchmarks); full mode's training steps to a tenth (quick mode's stay: its
    training must still learn); the batch sweep to its smallest and largest batch and the
    batch size (the largest sets the peak memory, the points between add no code path)."""
    steps = max(1, -(-s.train_steps // 10)) if s.mode == "full" else s.train_steps
    ends = {min(s.batch_sweep), s.batch_size, max(s.batch_sweep)}
    sweep = tuple(b for b in s.batch_sweep if b in ends)
    return replace(s, warmup=1, repeats=3, train_steps=steps, batch_sweep=sweep, fewest=True)


def sizes(mode: str | None = None) -> Sizes:
    """Problem sizes for ``mode`` (default: the current one), cut under ``COURSE_FEWEST=1``;
    ``COURSE_MODEL`` replaces the course's ResNet as ``arch`` at the mode's sizes."""
    mode = get_mode() if mode is None else mode
    if mode not in SIZES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    s = _fewest(SIZES[mode]) if fewest() else SIZES[mode]
    own = os.environ.get(MODEL_ENV, "").strip()
    return replace(s, arch=own) if own else s


def sizes_on(device: Any, mode: str | None = None) -> Sizes:
    """The sizes for work on ``device`` (a torch or OneFlow device, or its type): quick sizes for
    a CPU in full mode, said once. Work the course runs on a CPU even then (OneFlow's above all:
    it has no kernels for Hopper GPUs) would take tens of minutes per chapter at full sizes."""
    current = sizes(mode)
    kind = device if isinstance(device, str) else getattr(device, "type", str(device))
    if current.mode == "full" and kind == "cpu":
        q = sizes("quick")
        _say_once(
            f"work on the CPU uses quick sizes ({q.arch}, {q.image_size} px, batch {q.batch_size}) "
            "in full mode too: at full sizes it would take tens of minutes"
        )
        return q
    return current


@lru_cache(maxsize=1)
def has_cuda() -> bool:
    """True when PyTorch sees a usable CUDA GPU."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA stack means "no GPU" here
        return False


def _device_name(name: str, who: str, cuda: bool, problem: str | None = None) -> str:
    """The device ``name`` asks for: ``auto`` is CUDA where ``who`` sees a usable GPU, else the
    CPU; an explicit ``cuda`` raises where there is none, or ``problem`` says it cannot be used."""
    name = name.strip().lower()
    if name not in ("auto", "cpu", "cuda") and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {name!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    if name == "auto":
        return "cuda" if cuda and not problem else "cpu"
    if name.startswith("cuda") and (problem or not cuda):
        no_gpu = f"device {name!r} requested but {who} sees no CUDA GPU; use 'cpu' or 'auto'"
        raise RuntimeError(problem if cuda else no_gpu)
    return name


def torch_device(name: str = "auto") -> Any:
    """A ``torch.device``: ``auto`` picks CUDA when present, else the CPU; ``cuda`` without one raises."""
    import torch

    return torch.device(_device_name(name, "PyTorch", has_cuda()))


def flow_device(name: str = "auto") -> Any:
    """A ``oneflow.device`` with the same rules as :func:`torch_device`. OneFlow 0.9.0 has no code
    for GPUs newer than compute capability 8.x (H100/H200 and later): there ``auto`` picks the
    CPU and says why once, and an explicit ``cuda`` raises the reason."""
    flow = import_oneflow()
    cuda = bool(flow.cuda.is_available())
    problem = cuda_compat.oneflow_gpu_problem() if cuda else None
    device = _device_name(name, "OneFlow", cuda, problem)
    if problem and name.strip().lower() == "auto":
        _say_once(problem)
    return flow.device(device)


def paired_devices() -> tuple[Any, Any]:
    """``(torch.device, oneflow.device)``: both CUDA when OneFlow can use the GPU, else both CPU
    (printing why), so that a PyTorch-vs-OneFlow difference is never a GPU-vs-CPU difference."""
    fdev = flow_device()
    return torch_device(fdev.type), fdev


PAGE_COLUMNS = 88  # the book's code and output column: longer printed lines scroll sideways


def _print_wrapped(text: str) -> None:
    import textwrap

    print(textwrap.fill(text, width=PAGE_COLUMNS, subsequent_indent="  "))


@cache
def _say_once(message: str) -> None:
    _print_wrapped(f"NOTE: {message}")


_HARMLESS = (
    "libibverbs not available",
    "CUDA driver version is insufficient",
    "gpuGetDeviceCount",
    # PyTorch's profiler with profile_memory=True, when a tensor allocated before profiling
    # is freed inside it (e.g. last call's gradients): only that free is missing from its table
    "was allocated before the profiling started",
)


@contextmanager
def native_output(fd: int) -> Iterator[list[str]]:
    """Capture what native code writes to file descriptor ``fd`` (1 or 2) during the block; the
    list it yields holds those lines after the block (C's stdio buffers flushed first)."""
    import ctypes
    import tempfile

    (sys.stdout if fd == 1 else sys.stderr).flush()
    lines: list[str] = []
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield lines
        finally:
            ctypes.CDLL(None).fflush(None)
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            lines += tmp.read().decode(errors="replace").splitlines()


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Hide the harmless lines native code writes to file descriptor 2 (:data:`_HARMLESS`), pass on
    every other one after the block: OneFlow's 'no CUDA driver' at import and at the first
    ``nn.Graph`` compile on a CPU-only machine, PyTorch's profiler notes (chapter 4)."""
    with native_output(2) as lines:
        yield
    for line in lines:
        if line.strip() and not any(h in line for h in _HARMLESS):
            print(line, file=sys.stderr)


def import_oneflow() -> Any:
    """Import OneFlow once, quietly, after the course's fix for OneFlow 0.9.0's ``nn.Graph`` launch
    race (:mod:`helpers.core.oneflow_fix`); without it (no C++ compiler) a note says so."""
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


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy, PyTorch and (if imported) OneFlow."""
    check_int("seed", seed, minimum=0)
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if "oneflow" in sys.modules:
        sys.modules["oneflow"].manual_seed(seed)


def skip_without_gpu(what: str) -> bool:
    """True, after printing a skip line, when no CUDA GPU is present: ``if not
    skip_without_gpu("TensorRT INT8"): ...`` neither fails nor silently vanishes on a CPU."""
    if has_cuda():
        return False
    _print_wrapped(
        f"SKIPPED on this machine (no CUDA GPU): {what}. With a GPU this cell runs it for real."
    )
    return True


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


LIBRARIES = (
    "torch torchvision oneflow flowvision onnx onnxruntime-gpu openvino nvidia-pytriton numpy"
)


@lru_cache(maxsize=1)
def environment_report() -> dict[str, Any]:
    """Facts about this machine and its libraries (machine, cores, GPU, driver, versions, mode)."""
    facts, gpu = hardware.machine_facts(), hardware.gpu_info()
    host, where = hardware.host_memory()
    problem = cuda_compat.oneflow_gpu_problem() if gpu["gpu"] else None
    return {
        "mode": get_mode(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        **{k: facts[k] for k in ("cpu", "cpu_family", "cores", "flags")},
        "memory": f"{host / 2**30:.1f} GiB ({where})" if host else None,
        "cpu_quota": cgroup.cpu_quota(cgroup.find()),
        **gpu,
        "oneflow_gpu": None if gpu["gpu"] is None else ("no: " + problem if problem else "yes"),
        "libraries": {name: _version(name) for name in LIBRARIES.split()},
    }


def machine_label() -> str:
    """A short label for plots: :func:`~helpers.core.hardware.describe_machine` and the mode."""
    gpu = "" if hardware.machine_facts()["gpu"] else ", no GPU"
    return f"{hardware.describe_machine()}{gpu} ({get_mode()} mode)"


def print_environment_report() -> None:
    """Print the environment report and this mode's problem sizes (top of every chapter)."""
    import textwrap

    rep = environment_report()
    width = 14

    def row(key: str, value: Any) -> None:
        value = ", ".join(value) or "-" if isinstance(value, list) else value
        lines = textwrap.wrap("-" if value is None else str(value), PAGE_COLUMNS - width - 1)
        print(f"{key:<{width}} {lines[0] if lines else '-'}")
        for line in lines[1:]:
            print(" " * (width + 1) + line)

    for key in ("mode", "python", "os", "cpu", "cores", "cpu_quota", "flags", "memory"):
        if key != "cpu_quota":
            row(key, rep[key])
        elif rep[key] is not None:  # none: the cores above are this process's
            row(key, f"{rep[key]:g} cores (the container's cgroup; threads are capped to it)")
    for key in ("gpu", "driver", "cuda", "oneflow_gpu"):
        if key != "oneflow_gpu" or rep[key]:
            row(key.replace("_", " "), rep[key])
    la = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    row("load", f"{la} (1/5/15-minute load averages; each timing records its own load)")
    row("libraries", ", ".join(f"{k} {v}" for k, v in rep["libraries"].items() if v))
    s = asdict(sizes(rep["mode"]))
    row("sizes", ", ".join(f"{k}={v}" for k, v in s.items() if k != "mode" and v is not False))
    if s["fewest"]:
        row(
            "fewest",
            f"{FEWEST_ENV}=1: the fewest repeats that run every step (make fullcpu); "
            "these timings are not reference figures",
        )
    print(f"(set {MODE_ENV}=quick or {MODE_ENV}=full to choose the mode)")
