"""Honest timing of a callable: warm-up, synchronisation, repetitions, percentiles.

Chapter 0 writes the timing loop itself on its page (:func:`time_loop`, copied into this module by
``tools/save_cells.py``); everything here is the plumbing around it, modelled on
``torch.utils.benchmark`` (a timer, a :class:`Measurement`, a comparison table) but for PyTorch,
OneFlow, ONNX Runtime, OpenVINO or plain NumPy code alike::

    m = benchmark(lambda: model(x), label="eager", framework="torch", items=len(x))
    print(m)                        # median and p99 first, runs, spread, a warning when noisy
    print(compare_table([m1, m2]))  # table with speedups against the first row

Every chapter times with this module.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FRAMEWORKS",
    "SPREAD_WARNING",
    "synchronize",
    "percentile",
    "Measurement",
    "benchmark",
    "time_loop",
    "time_calls",
    "speedup",
    "compare_rows",
    "format_table",
    "compare_table",
    "benchmark_interleaved",
]

FRAMEWORKS = ("torch", "oneflow", "onnxruntime", "openvino", "numpy", "triton", "none")

# Spread above which a Measurement prints a warning: an interquartile range over 10% of the median.
# The same threshold as torch.utils.benchmark. Repeated calls of one fixed computation on a quiet
# machine vary by a few percent; a wider middle half means something else was moving the times
# (other processes, frequency scaling, too few runs), and a difference between two variants that
# is smaller than the spread is not a result.
SPREAD_WARNING = 0.10


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


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of already-sorted values (NumPy's default)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


_percentile = percentile  # the old private name (helpers.serving.triton_load imports it)


@dataclass
class Measurement:
    """Timings of one callable: per-call seconds plus what they mean.

    Printed as chapter 0 teaches: the median (typical) and p99 (worst case a user sees) first,
    with the number of runs, then the spread (interquartile range and p99/p50), and a warning
    when the IQR exceeds :data:`SPREAD_WARNING` of the median. ``throughput`` is taken at the
    median too, so one slow outlier does not move it.
    """

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
        for t in self.times_s:
            if not (isinstance(t, (int, float)) or hasattr(t, "__float__")) or not (
                math.isfinite(float(t)) and float(t) >= 0
            ):
                raise ValueError(
                    f"measurement {self.label!r}: times must be finite seconds >= 0, got {t!r}"
                )
        if self.items < 1:
            raise ValueError(f"items must be >= 1, got {self.items}")

    def _q(self, q: float) -> float:
        return percentile(sorted(self.times_s), q)

    @property
    def runs(self) -> int:
        """Number of timed calls."""
        return len(self.times_s)

    @property
    def mean(self) -> float:
        """Mean seconds per call (pulled up by slow outliers: prefer :attr:`median`)."""
        return statistics.fmean(self.times_s)

    @property
    def std(self) -> float:
        """Sample standard deviation of the per-call seconds."""
        return statistics.stdev(self.times_s) if len(self.times_s) > 1 else 0.0

    @property
    def median(self) -> float:
        """p50: the typical call, in seconds."""
        return statistics.median(self.times_s)

    @property
    def p25(self) -> float:
        """First quartile, in seconds."""
        return self._q(25)

    @property
    def p75(self) -> float:
        """Third quartile, in seconds."""
        return self._q(75)

    @property
    def p90(self) -> float:
        """90th percentile, in seconds."""
        return self._q(90)

    @property
    def p99(self) -> float:
        """99th percentile, in seconds (with fewer than ~100 runs, about the slowest run)."""
        return self._q(99)

    @property
    def min(self) -> float:
        """Fastest call, in seconds."""
        return min(self.times_s)

    @property
    def max(self) -> float:
        """Slowest call, in seconds."""
        return max(self.times_s)

    @property
    def iqr(self) -> float:
        """Interquartile range (p75 - p25) in seconds: the width of the middle half of the calls."""
        return self.p75 - self.p25

    @property
    def relative_iqr(self) -> float:
        """IQR as a fraction of the median (0 when the median is 0)."""
        return self.iqr / self.median if self.median > 0 else 0.0

    @property
    def tail_ratio(self) -> float:
        """p99 / p50: how much slower the worst calls are than the typical one (1 when median is 0)."""
        return self.p99 / self.median if self.median > 0 else 1.0

    @property
    def noisy(self) -> bool:
        """True when the IQR exceeds :data:`SPREAD_WARNING` of the median (needs 4 runs or more)."""
        return len(self.times_s) >= 4 and self.relative_iqr > SPREAD_WARNING

    @property
    def throughput(self) -> float:
        """Items per second at the median call time (infinite for a zero median)."""
        return self.items / self.median if self.median > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers (seconds, items/s, bytes) for tables and the ledger."""
        return {
            "label": self.label,
            "framework": self.framework,
            "items": self.items,
            "repeats": len(self.times_s),
            "warmup": self.warmup,
            "median_s": self.median,
            "p99_s": self.p99,
            "iqr_s": self.iqr,
            "p90_s": self.p90,
            "mean_s": self.mean,
            "std_s": self.std,
            "min_s": self.min,
            "throughput": self.throughput,
            "peak_memory_bytes": self.peak_memory_bytes,
            **self.meta,
        }

    def warnings(self) -> list[str]:
        """The warning lines of :meth:`__str__` (empty for a steady measurement)."""
        if not self.noisy:
            return []
        return [
            f"WARNING: the IQR is {self.relative_iqr:.0%} of the median "
            f"(over {SPREAD_WARNING:.0%}): the calls did not take a steady time (a busy machine, "
            "frequency scaling, too few runs); differences smaller than this spread are noise."
        ]

    def __str__(self) -> str:
        ms = 1e3
        mem = (
            f"; peak mem {self.peak_memory_bytes / 2**20:.1f} MiB ({self.memory_kind})"
            if self.peak_memory_bytes
            else ""
        )
        lines = [
            f"{self.label}: median {self.median * ms:.2f} ms, p99 {self.p99 * ms:.2f} ms per call "
            f"({self.runs} run{'s' if self.runs != 1 else ''} after {self.warmup} warm-up)",
            f"  spread: IQR {self.iqr * ms:.2f} ms ({self.relative_iqr:.0%} of the median), "
            f"p99/p50 {self.tail_ratio:.2f}; mean {self.mean * ms:.2f} +- {self.std * ms:.2f} ms; "
            f"{self.throughput:.1f} items/s at the median{mem}",
        ]
        return "\n".join(lines + ["  " + w for w in self.warnings()])


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
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(
            f"repeats must be a positive int, got {repeats!r}: at least one timed call is needed"
        )
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if isinstance(items, bool) or not isinstance(items, int) or items < 1:
        raise ValueError(f"items must be a positive int, got {items!r}")


def _waiter(framework: str, sync: bool) -> Callable[[], None] | None:
    """The ``sync`` argument of :func:`time_loop` for ``framework`` (None: no synchronisation)."""
    return (lambda: synchronize(framework)) if sync else None


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
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls, as a :class:`Measurement`.

    The timing is chapter 0's :func:`time_loop`; this function adds the checks of its arguments,
    a synchronisation after the warm-up even with ``sync=False``, memory tracking and a progress
    bar. Each timed call is followed by :func:`synchronize` for ``framework`` unless
    ``sync=False`` (only useful to *show* why synchronisation matters). ``items`` is the number
    of items one call processes (batch size), used for throughput. With ``track_memory`` the peak
    memory of the timed calls is recorded: CUDA bytes allocated for PyTorch on a GPU, otherwise
    the peak increase of this process's resident memory (sampled, so an approximation).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_counts(repeats, warmup, items)
    synchronize(framework)  # validates the name, and starts from an idle device
    wait = _waiter(framework, sync)
    time_loop(fn, warmup=warmup, repeats=0, sync=wait)  # the warm-up alone
    synchronize(framework)  # even with sync=False: the warm-up's work stays out of the timed calls

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
    try:
        if progress:  # one timed call per step: the bar moves between calls, off the clock
            from tqdm.auto import tqdm

            times = [
                t
                for _ in tqdm(range(repeats), desc=label, leave=False)
                for t in time_loop(fn, warmup=0, repeats=1, sync=wait)
            ]
        else:
            times = time_loop(fn, warmup=0, repeats=repeats, sync=wait)
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
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    synchronize(framework)  # validates the framework name even when sync=False
    return time_loop(fn, warmup=0, repeats=n, sync=_waiter(framework, sync))


def speedup(baseline: Measurement, other: Measurement) -> float:
    """How many times faster ``other`` processes items than ``baseline`` (ratio of median throughputs)."""
    return other.throughput / baseline.throughput


def compare_rows(
    measurements: Sequence[Measurement], baseline: Measurement | None = None
) -> list[dict[str, Any]]:
    """One dict per measurement: runs, p50/p99 ms, IQR (% of p50), items/s and speedup against ``baseline``.

    ``baseline`` defaults to the first measurement.
    """
    if not measurements:
        raise ValueError("nothing to compare: give at least one Measurement")
    base = baseline or measurements[0]
    return [
        {
            "label": m.label,
            "runs": len(m.times_s),
            "p50_ms": m.median * 1e3,
            "p99_ms": m.p99 * 1e3,
            "iqr_pct": 100 * m.relative_iqr,
            "items_per_s": m.throughput,
            "speedup": speedup(base, m),
        }
        for m in measurements
    ]


def format_table(rows: Sequence[dict[str, Any]], floatfmt: str = ".2f") -> str:
    """Render dict rows as an aligned text table (columns: the keys of the first row)."""
    if not rows:
        raise ValueError("no rows to format")
    keys = list(rows[0])
    for i, r in enumerate(rows):
        missing = [k for k in keys if k not in r]
        if missing:
            raise ValueError(f"row {i} lacks {missing}: every row needs the keys of the first row")
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
    ``framework`` is one name for all variants or a mapping ``label -> framework``. Each call
    is timed by :func:`time_loop`, synchronised.
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
    waits = {label: _waiter(fws[label], True) for label in fns}
    for label, fn in fns.items():
        time_loop(fn, warmup=warmup, repeats=0, sync=waits[label])  # warm-up, then synchronise
    times: dict[str, list[float]] = {label: [] for label in fns}
    rounds: Any = range(repeats)
    if progress:
        from tqdm.auto import tqdm

        rounds = tqdm(rounds, desc="interleaved rounds", leave=False)
    for _ in rounds:
        for label, fn in fns.items():
            times[label] += time_loop(fn, warmup=0, repeats=1, sync=waits[label])
    return {
        label: Measurement(
            label=label, times_s=times[label], items=items, framework=fws[label], warmup=warmup
        )
        for label in fns
    }


# ---- saved from notebooks/00_measuring.ipynb by tools/save_cells.py: edit it there ----
def time_loop(
    fn: Callable[[], Any],
    *,
    warmup: int,
    repeats: int,
    sync: Callable[[], Any] | None,
) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn()``, after ``warmup`` untimed calls.

    ``sync()`` waits until the work ``fn`` queued has finished (``torch.cuda.synchronize`` on a
    GPU, OneFlow's ``eager.Sync()``). ``None`` reads the clock as soon as ``fn`` returns, which
    measures how fast work is *queued*: only useful to show that lie. Written on chapter 0's page;
    :func:`benchmark` calls it.
    """
    for _ in range(warmup):  # 1. warm up, untimed: allocation, kernel choice, caches
        fn()
    if sync is not None:
        sync()  # the warm-up's queued work must not leak into the first timed call
    times = []
    for _ in range(repeats):
        start = time.perf_counter()  # 2. a monotonic clock with the finest resolution
        fn()
        if sync is not None:
            sync()  # 3. wait for the work, not for the queueing, before reading the clock
        times.append(time.perf_counter() - start)  # 4. keep every call: percentiles come later
    return times


# ---- end of cells saved from notebooks/00_measuring.ipynb ----
