"""Honest timing of a callable: warm-up, synchronisation, repetitions, percentiles.

Modelled on ``torch.utils.benchmark`` habits (a timer, a ``Measurement`` and a
comparison table as separate small ideas), but it times PyTorch, OneFlow,
ONNX Runtime, OpenVINO or plain NumPy code with the same API::

    m = benchmark(lambda: model(x), label="eager", framework="torch", items=len(x))
    print(m)                      # mean +- std, p50/p90/p99, items/s
    print(compare_table([m1, m2]))      # table with speedups against the first row
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

FRAMEWORKS = ("torch", "oneflow", "onnxruntime", "openvino", "numpy", "triton", "none")


def synchronize(framework: str) -> None:
    """Wait until all work queued by ``framework`` has finished.

    PyTorch on CUDA and OneFlow (even on CPU) return before the work is done; a
    clock read without this call measures only how fast work is *queued*.
    ONNX Runtime, OpenVINO and NumPy calls are synchronous: nothing to wait for.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use one of {', '.join(FRAMEWORKS)}")
    if framework == "torch":
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    elif framework == "oneflow":
        flow = sys.modules.get("oneflow")
        if flow is not None:
            flow._oneflow_internal.eager.Sync()


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of already-sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Measurement:
    """Timings of one callable: per-call seconds plus what they mean."""

    label: str
    times_s: list[float]
    items: int = 1  # items (images, requests) processed by one call
    framework: str = "none"
    warmup: int = 0
    peak_memory_bytes: int | None = None
    memory_kind: str | None = None  # "cuda allocated" or "cpu rss increase"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.times_s:
            raise ValueError(f"measurement {self.label!r} has no timings")
        if self.items < 1:
            raise ValueError(f"items must be >= 1, got {self.items}")

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times_s)

    @property
    def std(self) -> float:
        return statistics.stdev(self.times_s) if len(self.times_s) > 1 else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.times_s)

    @property
    def p90(self) -> float:
        return _percentile(sorted(self.times_s), 90)

    @property
    def p99(self) -> float:
        return _percentile(sorted(self.times_s), 99)

    @property
    def min(self) -> float:
        return min(self.times_s)

    @property
    def throughput(self) -> float:
        """Items per second at the mean call time."""
        return self.items / self.mean

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers (seconds, items/s, bytes) for tables and the ledger."""
        return {
            "label": self.label,
            "framework": self.framework,
            "items": self.items,
            "repeats": len(self.times_s),
            "warmup": self.warmup,
            "mean_s": self.mean,
            "std_s": self.std,
            "median_s": self.median,
            "p90_s": self.p90,
            "p99_s": self.p99,
            "min_s": self.min,
            "throughput": self.throughput,
            "peak_memory_bytes": self.peak_memory_bytes,
            **self.meta,
        }

    def __str__(self) -> str:
        mem = (
            f", peak mem {self.peak_memory_bytes / 2**20:.1f} MiB ({self.memory_kind})"
            if self.peak_memory_bytes
            else ""
        )
        return (
            f"{self.label}: {self.mean * 1e3:.2f} ms +- {self.std * 1e3:.2f} ms per call "
            f"(p50 {self.median * 1e3:.2f}, p90 {self.p90 * 1e3:.2f}, p99 {self.p99 * 1e3:.2f} ms; "
            f"{len(self.times_s)} runs after {self.warmup} warm-up), {self.throughput:.1f} items/s{mem}"
        )


class _RssSampler:
    """Samples this process's resident memory in a thread; reports the peak increase."""

    def __init__(self, interval_s: float = 0.002) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval_s
        self._stop = threading.Event()
        self.base = self._proc.memory_info().rss
        self.peak = self.base
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self._interval)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def _check_counts(repeats: int, warmup: int, items: int) -> None:
    """Clear errors for impossible repetition, warm-up or item counts."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(
            f"repeats must be a positive int, got {repeats!r}: at least one timed call is needed"
        )
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if not isinstance(items, int) or items < 1:
        raise ValueError(f"items must be a positive int, got {items!r}")


def benchmark(
    fn: Callable[[], Any],
    *,
    label: str = "call",
    framework: str = "torch",
    warmup: int = 3,
    repeats: int = 10,
    items: int = 1,
    sync: bool = True,
    track_memory: bool = False,
    progress: bool = False,
) -> Measurement:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls.

    Each timed call is bracketed by :func:`synchronize` for ``framework`` unless
    ``sync=False`` (only useful to *show* why synchronisation matters).
    ``items`` is the number of items one call processes (batch size), used for
    throughput. With ``track_memory`` the peak memory is recorded: CUDA bytes
    allocated for PyTorch on a GPU, otherwise the peak increase of this
    process's resident memory (sampled, so an approximation).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_counts(repeats, warmup, items)
    synchronize(framework)  # validates the name too
    for _ in range(warmup):
        fn()
    synchronize(framework)

    torch = sys.modules.get("torch")
    on_cuda = (
        framework == "torch"
        and torch is not None
        and torch.cuda.is_available()
        and torch.cuda.is_initialized()
    )
    sampler = None
    if track_memory and on_cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    elif track_memory:
        sampler = _RssSampler()
        sampler.__enter__()

    loop: Iterable[int] = range(repeats)
    if progress:
        from tqdm.auto import tqdm

        loop = tqdm(loop, desc=label, leave=False)
    times: list[float] = []
    try:
        for _ in loop:
            start = time.perf_counter()
            fn()
            if sync:
                synchronize(framework)
            times.append(time.perf_counter() - start)
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)

    peak, kind = None, None
    if track_memory and on_cuda:
        peak, kind = int(torch.cuda.max_memory_allocated() - base), "cuda allocated"
    elif sampler is not None:
        peak, kind = int(sampler.peak - sampler.base), "cpu rss increase"
    return Measurement(
        label=label,
        times_s=times,
        items=items,
        framework=framework,
        warmup=warmup,
        peak_memory_bytes=peak,
        memory_kind=kind,
    )


def time_calls(
    fn: Callable[[], Any], n: int, *, framework: str = "torch", sync: bool = True
) -> list[float]:
    """Seconds taken by each of ``n`` consecutive calls, with no warm-up (to *see* warm-up)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    synchronize(framework)  # validates the framework name even when sync=False
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        if sync:
            synchronize(framework)
        times.append(time.perf_counter() - start)
    return times


def speedup(baseline: Measurement, other: Measurement) -> float:
    """How many times faster ``other`` processes items than ``baseline`` (throughput ratio)."""
    return other.throughput / baseline.throughput


def compare_rows(
    measurements: Sequence[Measurement], baseline: Measurement | None = None
) -> list[dict[str, Any]]:
    """One dict per measurement with ms, items/s and speedup against ``baseline`` (default: the first)."""
    if not measurements:
        raise ValueError("nothing to compare: give at least one Measurement")
    base = baseline or measurements[0]
    return [
        {
            "label": m.label,
            "mean_ms": m.mean * 1e3,
            "std_ms": m.std * 1e3,
            "p50_ms": m.median * 1e3,
            "p99_ms": m.p99 * 1e3,
            "items_per_s": m.throughput,
            "speedup": speedup(base, m),
        }
        for m in measurements
    ]


def format_table(rows: Sequence[dict[str, Any]], floatfmt: str = ".2f") -> str:
    """Render dict rows as an aligned text table (same keys in every row)."""
    if not rows:
        raise ValueError("no rows to format")
    keys = list(rows[0])
    cells = [[k for k in keys]] + [
        [format(r[k], floatfmt) if isinstance(r[k], float) else str(r[k]) for k in keys]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    lines = [
        "  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths)))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare_table(measurements: Sequence[Measurement], baseline: Measurement | None = None) -> str:
    """A text table of measurements with speedups against ``baseline`` (default: the first)."""
    return format_table(compare_rows(measurements, baseline))


def benchmark_interleaved(
    fns: dict[str, Callable[[], Any]],
    *,
    framework: str | dict[str, str] = "torch",
    warmup: int = 2,
    repeats: int = 10,
    items: int = 1,
    progress: bool = False,
) -> dict[str, Measurement]:
    """Time several variants in round-robin order (A, B, C, A, B, C, ...), one Measurement each.

    On a shared or noisy machine a burst of background load then hits every variant alike,
    instead of whichever variant happened to be timed during it, so the *ratios* between
    variants (speedups) are far more stable than with one :func:`benchmark` after another.
    ``framework`` is one name for all variants or a mapping ``label -> framework``.
    """
    if not fns:
        raise ValueError("nothing to benchmark: give at least one labelled callable")
    for label, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"variant {label!r} is not callable ({type(fn).__name__})")
    _check_counts(repeats, warmup, items)
    if isinstance(framework, str):
        fws = {label: framework for label in fns}
    else:
        missing = [label for label in fns if label not in framework]
        if missing:
            raise ValueError(f"no framework given for variant(s) {missing}")
        fws = {label: framework[label] for label in fns}
    for fw in set(fws.values()):
        synchronize(fw)  # validates every name before any work
    for label, fn in fns.items():
        for _ in range(warmup):
            fn()
        synchronize(fws[label])
    times: dict[str, list[float]] = {label: [] for label in fns}
    loop: Iterable[int] = range(repeats)
    if progress:
        from tqdm.auto import tqdm

        loop = tqdm(loop, desc="interleaved rounds", leave=False)
    for _ in loop:
        for label, fn in fns.items():
            start = time.perf_counter()
            fn()
            synchronize(fws[label])
            times[label].append(time.perf_counter() - start)
    return {
        label: Measurement(
            label=label, times_s=times[label], items=items, framework=fws[label], warmup=warmup
        )
        for label in fns
    }
