"""Measuring batch sizes and thread counts: sweep tables, GPU utilisation, the fastest thread count."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from helpers.core.checks import check_int
from helpers.core.process_memory import Sampler
from helpers.measure.measurement import Measurement

__all__ = ["sweep_rows", "GpuUtilisation", "fastest_thread_count"]


def sweep_rows(measurements: Mapping[int, Measurement]) -> list[dict[str, Any]]:
    """Rows of ``{batch: Measurement}``: ms per call and per image, images/s, gain over the first."""
    if not measurements:
        raise ValueError("no measurements: run the sweep first")
    for b in measurements:
        check_int("batch size", b)
    first = measurements[min(measurements)]
    return [
        {
            "batch": b,
            "ms_per_call": m.median * 1e3,
            "images_per_s": b / m.median,
            "ms_per_image": m.median * 1e3 / b,
            "throughput_gain": (b / m.median) / (min(measurements) / first.median),
        }
        for b, m in sorted(measurements.items())
    ]


class GpuUtilisation(Sampler):
    """GPU 0's utilisation (percent, from ``nvidia-smi``) sampled in a background thread:
    ``with GpuUtilisation() as u: ...``, then ``u.mean``."""

    QUERY = ["nvidia-smi", "--id=0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]

    def __init__(self, interval_s: float = 0.1) -> None:
        super().__init__(interval_s)  # refuses a non-positive interval
        if shutil.which("nvidia-smi") is None:
            raise RuntimeError(
                "nvidia-smi not found: GPU utilisation can only be sampled on an NVIDIA GPU machine"
            )
        self.samples: list[float] = []

    def sample(self) -> None:
        try:  # a missed sample is skipped: the mean is over the ones read
            out = subprocess.run(self.QUERY, capture_output=True, text=True, timeout=5)
            self.samples.append(float(out.stdout.splitlines()[0]))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass

    @property
    def mean(self) -> float:
        """Mean utilisation (percent) over the samples taken."""
        if not self.samples:
            raise RuntimeError(
                "no utilisation samples were collected (the workload was too short?)"
            )
        return float(np.mean(self.samples))


def fastest_thread_count(
    fn: Any,
    candidates: Sequence[int] | None = None,
    *,
    repeats: int = 5,
) -> tuple[int, dict[int, Measurement]]:
    """The fastest PyTorch intra-op thread count for ``fn()`` (interleaved; restored after) among
    ``candidates``, default 1, PyTorch's count and every available core: on a busy machine,
    threads that meet at every layer can be many times *slower* than one."""
    import torch

    from helpers.core.threads import available_cores
    from helpers.measure.timer import benchmark_interleaved

    if candidates is None:
        candidates = sorted({1, torch.get_num_threads(), available_cores()})
    candidates = list(candidates)
    if not candidates:
        raise ValueError("no candidate thread counts")
    for t in candidates:
        check_int("thread count", t)
    saved = torch.get_num_threads()

    def run(t: int) -> Any:
        torch.set_num_threads(t)
        return fn()

    try:
        times = benchmark_interleaved(
            {t: partial(run, t) for t in candidates},
            framework="torch",
            repeats=repeats,
            threads={t: t for t in candidates},  # read once at the end, torch's would be the last's
        )
    finally:
        torch.set_num_threads(saved)
    best = min(times, key=lambda t: times[t].median)
    return best, times
