"""Measuring batch sizes and thread counts: sweep tables, GPU utilisation, the fastest thread count.

Plumbing for the chapters that measure parallelism (the lesson itself, e.g. chapter 5's BatchNorm
batch-independence check, is written on the pages):

- :func:`sweep_rows` -- a batch sweep as table rows (latency per call, images/s, cost per image);
- :class:`GpuUtilisation` -- samples ``nvidia-smi`` in a thread while a workload runs;
- :func:`fastest_thread_count` -- PyTorch's fastest intra-op thread count on this machine now
  (chapters 4, 5 and 6 time every PyTorch variant with it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from helpers.core.process_memory import Sampler
from helpers.measure.measurement import Measurement

__all__ = ["sweep_rows", "GpuUtilisation", "fastest_thread_count"]


def sweep_rows(measurements: Mapping[int, Measurement]) -> list[dict[str, Any]]:
    """Rows ``batch, ms_per_call, images_per_s, ms_per_image, speedup_vs_first`` from ``{batch: Measurement}``."""
    if not measurements:
        raise ValueError("no measurements: run the sweep first")
    bad = [b for b in measurements if not isinstance(b, int) or b < 1]
    if bad:
        raise ValueError(f"batch sizes must be positive ints, got {bad}")
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
    """Sample GPU utilisation (percent, from ``nvidia-smi``) in a background thread::

    with GpuUtilisation() as u:
        run_workload()
    print(u.mean)
    """

    def __init__(self, interval_s: float = 0.1, gpu: int = 0) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if shutil.which("nvidia-smi") is None:
            raise RuntimeError(
                "nvidia-smi not found: GPU utilisation can only be sampled on an NVIDIA GPU machine"
            )
        super().__init__(interval_s)
        self.gpu = gpu
        self.samples: list[float] = []

    def _query(self) -> float | None:
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    f"--id={self.gpu}",
                    "--query-gpu=utilization.gpu",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            ).stdout.strip()
            return float(out.splitlines()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None

    def sample(self) -> None:
        value = self._query()
        if value is not None:
            self.samples.append(value)

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
    warmup: int = 2,
    repeats: int = 5,
) -> tuple[int, dict[int, Measurement]]:
    """Time ``fn()`` with each PyTorch intra-op thread count in ``candidates`` (interleaved); return the fastest.

    On a quiet machine more threads are usually faster; on a busy one (other processes on the same
    cores) threads that must meet at every layer can be many times *slower* than one thread. The
    thread count is restored afterwards. Default candidates: 1, PyTorch's current count (its
    default is the number of physical cores) and every core this process may use
    (:func:`helpers.core.threads.available_cores`: its affinity mask, capped by a container's CPU
    quota).
    """
    import torch

    from helpers.core.threads import available_cores
    from helpers.measure.timer import benchmark_interleaved

    if candidates is None:
        candidates = sorted({1, torch.get_num_threads(), available_cores()})
    candidates = list(candidates)
    if not candidates or any(
        not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in candidates
    ):
        raise ValueError(f"candidates must be positive thread counts, got {candidates}")
    saved = torch.get_num_threads()

    def with_threads(t: int) -> Any:
        def run() -> Any:
            torch.set_num_threads(t)
            return fn()

        return run

    try:
        times = benchmark_interleaved(
            {t: with_threads(t) for t in candidates},
            framework="torch",
            warmup=warmup,
            repeats=repeats,
            threads={t: t for t in candidates},  # read once at the end, torch's would be the last's
        )
    finally:
        torch.set_num_threads(saved)
    best = min(times, key=lambda t: times[t].median)
    return best, times
