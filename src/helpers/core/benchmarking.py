"""Honest timing of a callable: warm-up, synchronisation, repetitions, percentiles.

Chapter 0 writes the timing loop itself on its page (:func:`time_loop`, copied into this module by
``tools/save_cells.py``); everything here is the plumbing around it, modelled on
``torch.utils.benchmark`` (a timer, a :class:`Measurement`, a comparison table) but for PyTorch,
OneFlow, ONNX Runtime, OpenVINO or plain NumPy code alike::

    m = benchmark(lambda: model(x), label="eager", framework="torch", items=len(x))
    print(m)                        # median and p99 first, runs, spread, a warning when noisy
    print(compare_table([m1, m2]))  # table with speedups against the first row

Every measurement also says where and how it ran: the device and threads it was given, the cores it
really used (this process's CPU time over the wall time of the timed calls) and the machine's load
while it ran (:class:`MachineLoad`: load average, and the CPU time *other* processes took from
``/proc/stat``), with a ``contended`` flag (:data:`CONTENDED_SHARE`). Interleaved rounds rotate their
order, and :func:`paired_ratio` gives a speedup with the spread of its per-round ratios.

Every chapter times with this module.
"""

from __future__ import annotations

import math
import os
import resource
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
    "CONTENDED_SHARE",
    "MachineLoad",
    "LoadProbe",
    "read_proc_stat",
    "framework_threads",
    "RatioSummary",
    "paired_ratio",
    "matmul_pair",
    "measurement_from_dict",
    "thread_cpu_seconds",
]

FRAMEWORKS = ("torch", "oneflow", "onnxruntime", "openvino", "numpy", "triton", "none")

# Spread above which a Measurement prints a warning: an interquartile range over 10% of the median.
# The same threshold as torch.utils.benchmark. Repeated calls of one fixed computation on a quiet
# machine vary by a few percent; a wider middle half means something else was moving the times
# (other processes, frequency scaling, too few runs), and a difference between two variants that
# is smaller than the spread is not a result.
SPREAD_WARNING = 0.10

# A measurement is *contended* when other processes (or, on a VM, the hypervisor's other guests:
# steal time) took more CPU time during it than this share of one core over its wall time, beyond
# what /proc/stat's tick resolution can tell apart. The same 10% as SPREAD_WARNING, for the same
# reason: a program that loses 10% of one core's time to others can be slowed by up to about 10%,
# which is already a difference this module calls noise; below it, the others' work cannot make a
# difference we would report. Interleaving does not protect a ratio from it: runtimes that use
# more cores, or more memory bandwidth, suffer unequally from the same neighbour.
CONTENDED_SHARE = 0.10


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


# ---- the machine's load during a measurement ----------------------------------------------------


def read_proc_stat(text: str | None = None) -> tuple[int, int] | None:
    """(busy ticks, steal ticks) summed over all CPUs from ``/proc/stat``'s ``cpu`` line.

    Busy is user + nice + system + irq + softirq (guest time is already inside user); idle and
    iowait are not busy; steal is time the hypervisor ran other guests on our virtual CPUs. Ticks
    are ``os.sysconf("SC_CLK_TCK")`` per second. ``text`` replaces the file (for tests); None when
    the file is missing (not Linux) or unreadable.
    """
    if text is None:
        try:
            with open("/proc/stat") as f:
                text = f.read()
        except OSError:
            return None
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            v = [int(x) for x in fields[1:]] + [0] * 10
            user, nice, system, _idle, _iowait, irq, softirq, steal = v[:8]
            return user + nice + system + irq + softirq, steal
    raise ValueError("/proc/stat has no aggregate 'cpu' line")


def _family_cpu_s() -> float:
    """CPU seconds of this process and its children (live ones through psutil, waited ones too)."""
    own = time.process_time()
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own + waited.ru_utime + waited.ru_stime
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.Error:  # it ended between the listing and the read
                pass
    except ImportError:
        pass
    return total


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass
class _Readers:
    """Where :class:`LoadProbe` reads the machine (tests replace these with fakes)."""

    proc_stat: Callable[[], tuple[int, int] | None] = read_proc_stat
    family_cpu_s: Callable[[], float] = _family_cpu_s
    process_cpu_s: Callable[[], float] = time.process_time
    wall_s: Callable[[], float] = time.perf_counter
    loadavg: Callable[[], float | None] = _loadavg
    clock_ticks: int = field(default_factory=lambda: os.sysconf("SC_CLK_TCK"))
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)


READERS = _Readers()


@dataclass(frozen=True)
class MachineLoad:
    """The machine's load over one timed region, and whether it was contended.

    ``others_cpu_s`` is the CPU time every other process on the machine took meanwhile: the busy
    time of all CPUs (``/proc/stat``) minus this process's and its children's, plus steal time.
    ``contended`` applies :data:`CONTENDED_SHARE`: others took more than that share of one core
    over ``wall_s``, beyond ``resolution_s`` (``/proc/stat`` counts whole ticks, about two per CPU
    per interval). None where ``/proc/stat`` cannot be read: unknown, not quiet.
    """

    wall_s: float
    others_cpu_s: float | None
    steal_s: float | None
    loadavg_before: float | None
    loadavg_after: float | None
    resolution_s: float
    share: float = CONTENDED_SHARE

    @property
    def others_cores(self) -> float | None:
        """Cores other processes kept busy on average (others' CPU seconds / wall seconds)."""
        if self.others_cpu_s is None or self.wall_s <= 0:
            return None
        return self.others_cpu_s / self.wall_s

    @property
    def contended(self) -> bool | None:
        """The rule: others' CPU time > share x wall time (one core) + the counter's resolution."""
        if self.others_cpu_s is None:
            return None
        return self.others_cpu_s > self.share * self.wall_s + self.resolution_s

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers for tables and the ledger."""
        return {
            "wall_s": self.wall_s,
            "others_cpu_s": self.others_cpu_s,
            "others_cores": self.others_cores,
            "steal_s": self.steal_s,
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
            "resolution_s": self.resolution_s,
            "contended": self.contended,
            "rule": f"others' CPU > {self.share:.0%} of one core + {self.resolution_s:.2f} s",
        }

    def describe(self) -> str:
        """A short sentence: others' cores, load average, and the verdict."""
        cores = self.others_cores
        la = (
            f"load avg {self.loadavg_before:.2f}->{self.loadavg_after:.2f}"
            if self.loadavg_before is not None and self.loadavg_after is not None
            else "load avg unknown"
        )
        other = f"other processes {cores:.2f} cores" if cores is not None else "others unknown"
        verdict = {True: "CONTENDED", False: "quiet", None: "load unknown"}[self.contended]
        return f"{other}, {la}: {verdict}"

    @staticmethod
    def merge(loads: Sequence[MachineLoad | None]) -> MachineLoad | None:
        """One load for several regions (their sums; contended when the total is)."""
        known = [x for x in loads if x is not None]
        if not known:
            return None
        others = [x.others_cpu_s for x in known]
        steal = [x.steal_s for x in known]
        before = [x.loadavg_before for x in known if x.loadavg_before is not None]
        after = [x.loadavg_after for x in known if x.loadavg_after is not None]
        return MachineLoad(
            wall_s=sum(x.wall_s for x in known),
            others_cpu_s=None if None in others else sum(others),  # type: ignore[arg-type]
            steal_s=None if None in steal else sum(steal),  # type: ignore[arg-type]
            loadavg_before=max(before) if before else None,
            loadavg_after=max(after) if after else None,
            resolution_s=sum(x.resolution_s for x in known),
            share=known[0].share,
        )


# Every MachineLoad this process measured, in order: the ledger stamps its records with them.
LOAD_LOG: list[MachineLoad] = []


class LoadProbe:
    """Reads the machine before and after a timed region; :meth:`stop` returns its :class:`MachineLoad`.

    ``with LoadProbe() as probe: ...`` then ``probe.load``. Readers come from :data:`READERS`.
    """

    def __init__(self, readers: _Readers | None = None) -> None:
        self.r = readers or READERS
        self.load: MachineLoad | None = None

    def start(self) -> LoadProbe:
        self._la0 = self.r.loadavg()
        self._stat0 = self.r.proc_stat()
        self._fam0 = self.r.family_cpu_s()
        self._t0 = self.r.wall_s()
        return self

    def stop(self) -> MachineLoad:
        wall = self.r.wall_s() - self._t0
        fam = self.r.family_cpu_s() - self._fam0
        stat1 = self.r.proc_stat()
        tick = 1.0 / self.r.clock_ticks
        others = steal = None
        if self._stat0 is not None and stat1 is not None:
            busy = (stat1[0] - self._stat0[0]) * tick
            steal = (stat1[1] - self._stat0[1]) * tick
            others = max(0.0, busy - fam) + steal
        self.load = MachineLoad(
            wall_s=wall,
            others_cpu_s=others,
            steal_s=steal,
            loadavg_before=self._la0,
            loadavg_after=self.r.loadavg(),
            resolution_s=2 * self.r.cpus * tick,
        )
        LOAD_LOG.append(self.load)
        return self.load

    def __enter__(self) -> LoadProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def framework_threads(framework: str) -> int | None:
    """Threads ``framework`` computes with on a CPU, as set (None when this module cannot tell).

    PyTorch: ``torch.get_num_threads()``. OneFlow has no getter: the number
    :func:`helpers.core.environment.same_threads` gave it, else ``ONEFLOW_EP_CPU_NUM_PARALLELS``,
    else its default (the CPUs minus two, at least one). ONNX Runtime and OpenVINO take theirs per
    session: the caller passes ``threads=``.
    """
    if framework == "torch":
        torch = sys.modules.get("torch")
        return torch.get_num_threads() if torch is not None else None
    if framework == "oneflow":
        from helpers.core.environment import oneflow_threads

        return oneflow_threads()
    return None


@dataclass(frozen=True)
class RatioSummary:
    """A speedup from interleaved rounds: the median of the per-round ratios and their spread."""

    median: float
    p25: float
    p75: float
    rounds: int
    ratios: tuple[float, ...]

    @property
    def iqr(self) -> float:
        """p75 - p25 of the per-round ratios."""
        return self.p75 - self.p25

    def __str__(self) -> str:
        return (
            f"{self.median:.2f}x (per-round IQR {self.p25:.2f}-{self.p75:.2f}, "
            f"{self.rounds} rounds)"
        )


def paired_ratio(baseline: Measurement, other: Measurement) -> RatioSummary:
    """How many times faster ``other`` ran than ``baseline``, round by round.

    For two measurements of one :func:`benchmark_interleaved` run: round *i*'s ratio is
    baseline time *i* / other time *i* (the two calls ran side by side, under the same load), so
    the spread of these ratios is the spread of the *speedup* itself, which the two measurements'
    own spreads overstate. Per item, so different batch sizes compare fairly.
    """
    if len(baseline.times_s) != len(other.times_s):
        raise ValueError(
            f"{baseline.label!r} has {len(baseline.times_s)} rounds, {other.label!r} "
            f"{len(other.times_s)}: paired ratios need one interleaved run"
        )
    ratios = sorted(
        (b / baseline.items) / (o / other.items)
        for b, o in zip(baseline.times_s, other.times_s)
        if o > 0
    )
    if not ratios:
        raise ValueError("no round with a positive time")
    return RatioSummary(
        median=statistics.median(ratios),
        p25=percentile(ratios, 25),
        p75=percentile(ratios, 75),
        rounds=len(ratios),
        ratios=tuple(ratios),
    )


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
    threads: int | None = None  # threads the framework was given (None: not known)
    device: str | None = None  # where the work ran ("cpu", "cuda:0"), as the caller says
    cpu_s: float | None = None  # this process's CPU seconds (all its threads) over the timed calls
    wall_s: float | None = None  # wall seconds of the same timed calls
    load: MachineLoad | None = None  # the machine's load while the timed calls ran

    @property
    def cores_used(self) -> float | None:
        """Cores this process really kept busy while timed: CPU seconds / wall seconds (None: unknown).

        On a CPU this is the parallelism the framework achieved, whatever it was asked for: 2.0 for
        two threads that both computed all the time, 1.0 for one. (On a GPU it is the host side only.)
        """
        if self.cpu_s is None or not self.wall_s:
            return None
        return self.cpu_s / self.wall_s

    @property
    def contended(self) -> bool | None:
        """True when other processes took a share of the CPU while this ran (:data:`CONTENDED_SHARE`)."""
        return None if self.load is None else self.load.contended

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
            "threads": self.threads,
            "device": self.device,
            "cpu_s": self.cpu_s,
            "cores_used": self.cores_used,
            "contended": self.contended,
            "load": self.load.as_dict() if self.load is not None else None,
            **self.meta,
        }

    def warnings(self) -> list[str]:
        """The warning lines of :meth:`__str__` (empty for a steady measurement on a quiet machine)."""
        out = []
        if self.noisy:
            out.append(
                f"WARNING: the IQR is {self.relative_iqr:.0%} of the median "
                f"(over {SPREAD_WARNING:.0%}): the calls did not take a steady time (a busy machine, "
                "frequency scaling, too few runs); differences smaller than this spread are noise."
            )
        if self.contended:
            out.append(f"WARNING: CONTENDED: {self.load.describe()}")  # type: ignore[union-attr]
        return out

    def where(self) -> str:
        """One line: device, threads given, cores really used, and the machine's load."""
        cores = self.cores_used
        parts = [
            f"device {self.device or '?'}",
            f"{self.threads if self.threads is not None else '?'} thread(s) given",
            f"{cores:.2f} cores used" if cores is not None else "cores used unknown",
        ]
        if self.load is not None:
            parts.append(self.load.describe())
        return "; ".join(parts)

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
        known = (self.device, self.threads, self.cpu_s, self.load)
        if any(v is not None for v in known):
            lines.append(f"  ran on: {self.where()}")
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
    threads: int | None = None,
    device: str | None = None,
) -> Measurement:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls, as a :class:`Measurement`.

    The timing is chapter 0's :func:`time_loop`; this function adds the checks of its arguments,
    a synchronisation after the warm-up even with ``sync=False``, memory tracking and a progress
    bar. Each timed call is followed by :func:`synchronize` for ``framework`` unless
    ``sync=False`` (only useful to *show* why synchronisation matters). ``items`` is the number
    of items one call processes (batch size), used for throughput. With ``track_memory`` the peak
    memory of the timed calls is recorded: CUDA bytes allocated for PyTorch on a GPU, otherwise
    the peak increase of this process's resident memory (sampled, so an approximation).
    ``threads`` is what the framework was given (default: read from PyTorch or OneFlow,
    :func:`framework_threads`); ``device`` where it runs. The measurement also records this
    process's CPU time over the timed calls (``cores_used``) and the machine's load
    (:class:`MachineLoad`, ``contended``).
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
    probe = LoadProbe().start()
    cpu0, wall0 = READERS.process_cpu_s(), READERS.wall_s()
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
    cpu_s, wall_s = READERS.process_cpu_s() - cpu0, READERS.wall_s() - wall0
    load = probe.stop()

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
        threads=framework_threads(framework) if threads is None else threads,
        device=device,
        cpu_s=cpu_s,
        wall_s=wall_s,
        load=load,
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

    Each row also names its device and threads (from the measurement, else its ``meta``; '?' when
    unknown), the cores it really used, and ``machine``: 'CONTENDED' when other processes took
    CPU time while it ran (:data:`CONTENDED_SHARE`), 'quiet', or '?'. ``baseline`` defaults to
    the first measurement.
    """
    if not measurements:
        raise ValueError("nothing to compare: give at least one Measurement")
    base = baseline or measurements[0]

    def cores(m: Measurement) -> str:
        return "?" if m.cores_used is None else f"{m.cores_used:.2f}"

    def threads(m: Measurement) -> Any:
        return m.threads if m.threads is not None else m.meta.get("threads", "?")

    flags = {True: "CONTENDED", False: "quiet", None: "?"}
    return [
        {
            "label": m.label,
            "device": m.device or m.meta.get("device", "?"),
            "threads": threads(m),
            "cores_used": cores(m),
            "runs": len(m.times_s),
            "p50_ms": m.median * 1e3,
            "p99_ms": m.p99 * 1e3,
            "iqr_pct": 100 * m.relative_iqr,
            "items_per_s": m.throughput,
            "speedup": speedup(base, m),
            "machine": flags[m.contended],
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
    items: int | dict[str, int] = 1,
    progress: bool = False,
    rotate: bool = True,
    threads: int | dict[str, int | None] | None = None,
    device: str | dict[str, str] | None = None,
) -> dict[str, Measurement]:
    """Time several variants in rounds (A, B, C, then B, C, A, then C, A, B, ...), one Measurement each.

    On a shared or noisy machine a burst of background load then hits every variant alike,
    instead of whichever variant happened to be timed during it, so the *ratios* between
    variants (speedups) are far more stable than with one :func:`benchmark` after another
    (:func:`paired_ratio` gives a speedup with its per-round spread). With ``rotate`` (the
    default) each round starts one variant later, so no variant always runs first or right after
    the same neighbour: a fixed order biases the ratios of identical variants by a few percent.
    ``framework``, ``items``, ``threads`` and ``device`` are one value for all variants or a
    mapping ``label -> value`` (``items`` per call: a batch-size sweep gives each its batch). Every variant gets the same ``warmup``. Each call is timed by
    :func:`time_loop`, synchronised; each Measurement records its own CPU time and the machine's
    load over the whole run.
    """
    if not fns:
        raise ValueError("nothing to benchmark: give at least one labelled callable")
    for label, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"variant {label!r} is not callable ({type(fn).__name__})")
    n_items = items if isinstance(items, dict) else {label: items for label in fns}
    missing = [label for label in fns if label not in n_items]
    if missing:
        raise ValueError(f"no items given for variant(s) {missing}")
    for label in fns:
        _check_counts(repeats, warmup, n_items[label])
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
    cpu: dict[str, float] = {label: 0.0 for label in fns}
    wall: dict[str, float] = {label: 0.0 for label in fns}
    rounds: Any = range(repeats)
    if progress:
        from tqdm.auto import tqdm

        rounds = tqdm(rounds, desc="interleaved rounds", leave=False)
    labels = list(fns)
    probe = LoadProbe().start()
    for r in rounds:
        k = r % len(labels) if rotate else 0
        for label in labels[k:] + labels[:k]:
            c0, w0 = READERS.process_cpu_s(), READERS.wall_s()
            times[label] += time_loop(fns[label], warmup=0, repeats=1, sync=waits[label])
            cpu[label] += READERS.process_cpu_s() - c0
            wall[label] += READERS.wall_s() - w0
    load = probe.stop()

    def pick(value: Any, label: str) -> Any:
        return value.get(label) if isinstance(value, dict) else value

    return {
        label: Measurement(
            label=label,
            times_s=times[label],
            items=n_items[label],
            framework=fws[label],
            warmup=warmup,
            threads=(
                framework_threads(fws[label])
                if pick(threads, label) is None
                else pick(threads, label)
            ),
            device=pick(device, label),
            cpu_s=cpu[label],
            wall_s=wall[label],
            load=load,
        )
        for label in fns
    }


def thread_cpu_seconds(
    fn: Callable[[], Any], *, repeats: int, sync: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """CPU seconds each thread of this process spent while ``fn()`` ran ``repeats`` times.

    Returns the wall seconds and the per-thread CPU seconds, largest first (threads under 1 ms
    left out), read with ``psutil`` before and after: it tells the threads that computed from the
    ones that only waited. A thread near the wall time was busy all along, *working or spinning*
    (a scheduler that polls with ``sched_yield`` counts as busy); ``busy_threads`` counts those
    above half the wall time. Threads that end before the second reading are not counted.
    """
    import psutil

    proc = psutil.Process()

    def snapshot() -> dict[int, float]:
        return {t.id: t.user_time + t.system_time for t in proc.threads()}

    if sync is not None:
        sync()
    before, t0 = snapshot(), time.perf_counter()
    for _ in range(repeats):
        fn()
        if sync is not None:
            sync()
    wall, after = time.perf_counter() - t0, snapshot()
    used = sorted(
        (after[tid] - before.get(tid, 0.0) for tid in after if tid in before or after[tid] > 0),
        reverse=True,
    )
    used = [u for u in used if u >= 1e-3]
    return {
        "wall_s": wall,
        "thread_cpu_s": used,
        "busy_threads": sum(u > 0.5 * wall for u in used),
        "cores_used": sum(used) / wall if wall > 0 else None,
    }


def matmul_pair(
    *, n: int = 2048, warmup: int = 3, repeats: int = 10, threads: int | None = None
) -> dict[str, Any]:
    """An ``n`` x ``n`` float32 matrix product in PyTorch and in OneFlow on the CPU, timed interleaved.

    Both frameworks get the same threads (:func:`helpers.core.environment.same_threads`, default
    every core) and warm-up. Returns JSON-ready results, so a fresh process can run it
    (``run_in_subprocess("helpers.core.benchmarking:matmul_pair", ..., env=...)``): per framework
    the Measurement's ``as_dict()`` with its ``times_s`` and GFLOP/s at the median, plus
    ``oneflow_blas`` (:func:`helpers.core.environment.oneflow_blas`: the library OneFlow computes
    with, its threads and kernels).
    """
    import torch

    from helpers.core.environment import import_oneflow, oneflow_blas, same_threads

    given = same_threads(threads)  # before OneFlow starts: it reads its thread setting then
    flow = import_oneflow()
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    fa, fb = flow.tensor(a.numpy()), flow.tensor(b.numpy())
    with torch.inference_mode():
        res = benchmark_interleaved(
            {"PyTorch": lambda: a @ b, "OneFlow": lambda: flow.matmul(fa, fb)},
            framework={"PyTorch": "torch", "OneFlow": "oneflow"},
            warmup=warmup,
            repeats=repeats,
            threads=given,
            device="cpu",
        )
    flops = 2.0 * n**3
    per_thread = {
        label: thread_cpu_seconds(fn, repeats=max(2, repeats // 2), sync=sync)
        for label, fn, sync in (
            ("PyTorch", lambda: a @ b, lambda: None),
            ("OneFlow", lambda: flow.matmul(fa, fb), lambda: synchronize("oneflow")),
        )
    }
    return {
        "n": n,
        "threads": given,
        "per_thread": per_thread,
        "oneflow_blas": oneflow_blas(),
        **{
            label: {**m.as_dict(), "times_s": m.times_s, "gflops": flops / m.median / 1e9}
            for label, m in res.items()
        },
    }


def measurement_from_dict(d: dict[str, Any]) -> Measurement:
    """A :class:`Measurement` back from ``as_dict()`` plus ``times_s`` (what a subprocess returns)."""
    load = d.get("load")
    return Measurement(
        label=d["label"],
        times_s=list(d["times_s"]),
        items=d.get("items", 1),
        framework=d.get("framework", "none"),
        warmup=d.get("warmup", 0),
        threads=d.get("threads"),
        device=d.get("device"),
        cpu_s=d.get("cpu_s"),
        wall_s=(d["cpu_s"] / d["cores_used"]) if d.get("cores_used") else None,
        load=None
        if load is None
        else MachineLoad(
            wall_s=load["wall_s"],
            others_cpu_s=load["others_cpu_s"],
            steal_s=load["steal_s"],
            loadavg_before=load["loadavg_before"],
            loadavg_after=load["loadavg_after"],
            resolution_s=load.get("resolution_s", 0.0),
        ),
    )


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
