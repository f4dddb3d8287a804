"""What a timing means: :class:`Measurement` (like ``torch.utils.benchmark``'s: median and p99
first, a warning when the spread is large, where it ran) and :func:`paired_ratio`, whose
:class:`RatioSummary` is the one shape of a speed-up from the page to the ledger."""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from helpers.core.checks import check_int, check_number
from helpers.core.environment import PAGE_COLUMNS
from helpers.measure.machine import MachineLoad

__all__ = ["percentile", "Measurement", "RatioSummary", "paired_ratio", "measurement_from_dict"]

# Spread above which a Measurement warns: an IQR over 10% of the median, torch.utils.benchmark's
# threshold. Repeated calls on a quiet machine vary by a few percent; a wider middle half means
# something else moved the times (other processes, frequency scaling, too few runs), and a
# difference between two variants smaller than the spread is not a result.
SPREAD_WARNING = 0.10


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated (NumPy's default)."""
    import numpy as np  # not at import: `import helpers` loads no framework

    if not len(values):
        raise ValueError("no values")
    return float(np.percentile(values, q))


@dataclass
class Measurement:
    """Per-call seconds of one callable, printed as chapter 0 teaches: median (typical) and p99
    (the worst a user sees) first, then the spread, warned when noisy; throughput at the median."""

    label: str
    times_s: list[float]
    items: int = 1  # items (images, requests) processed by one call
    framework: str = "none"
    warmup: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None  # threads the framework was given (None: not known)
    device: str | None = None  # where the work ran ("cpu", "cuda:0"), as the caller says
    cpu_s: float | None = None  # this process's CPU seconds (all its threads) over the timed calls
    wall_s: float | None = None  # wall seconds of the same timed calls
    load: MachineLoad | None = None  # the machine's load while the timed calls ran

    def __post_init__(self) -> None:
        if not self.times_s:
            raise ValueError(f"measurement {self.label!r} has no timings")
        for t in self.times_s:
            check_number(f"measurement {self.label!r}: each time in seconds", t, minimum=0)
        check_int("items", self.items)

    @property
    def cores_used(self) -> float | None:
        """CPU seconds / wall seconds while timed (None: unknown): cores busy, computing *or
        spinning* (a runtime polling for work counts), not the parallelism achieved."""
        return None if self.cpu_s is None or not self.wall_s else self.cpu_s / self.wall_s

    @property
    def contended(self) -> bool | None:
        """True when other processes took a share of the CPU while this ran (None: unknown)."""
        return None if self.load is None else self.load.contended

    # Seconds per call. p99 with fewer than ~100 runs is about the slowest run; prefer the median
    # to the mean, which slow outliers pull up.
    runs = property(lambda self: len(self.times_s))
    mean = property(lambda self: statistics.fmean(self.times_s))
    std = property(lambda self: statistics.stdev(self.times_s) if self.runs > 1 else 0.0)
    median = property(lambda self: statistics.median(self.times_s))
    p25 = property(lambda self: percentile(self.times_s, 25))
    p75 = property(lambda self: percentile(self.times_s, 75))
    p99 = property(lambda self: percentile(self.times_s, 99))
    iqr = property(lambda self: self.p75 - self.p25)  # the width of the middle half of the calls

    @property
    def relative_iqr(self) -> float:
        """IQR as a fraction of the median (0 when the median is 0)."""
        return self.iqr / self.median if self.median > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """True when the IQR exceeds :data:`SPREAD_WARNING` of the median (needs 4 runs or more)."""
        return self.runs >= 4 and self.relative_iqr > SPREAD_WARNING

    @property
    def throughput(self) -> float:
        """Items per second at the median call time (infinite for a zero median)."""
        return self.items / self.median if self.median > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers (seconds, items/s) for tables, the ledger and a subprocess's answer."""
        stats = ("median", "p99", "iqr", "mean", "std")
        return {
            "label": self.label,
            "framework": self.framework,
            "items": self.items,
            "repeats": self.runs,
            "warmup": self.warmup,
            **{f"{k}_s": getattr(self, k) for k in stats},
            "throughput": self.throughput,
            **{k: getattr(self, k) for k in ("threads", "device", "cpu_s", "cores_used")},
            "contended": self.contended,
            "load": self.load.as_dict() if self.load is not None else None,
            **self.meta,
        }

    def __str__(self) -> str:
        ms, cores = 1e3, self.cores_used
        tail = self.p99 / self.median if self.median > 0 else 1.0  # the worst calls vs typical
        lines = [
            f"{self.label}: median {self.median * ms:.2f} ms, p99 {self.p99 * ms:.2f} ms per call "
            f"({self.runs} run{'s' if self.runs != 1 else ''} after {self.warmup} warm-up)",
            f"  spread: IQR {self.iqr * ms:.2f} ms ({self.relative_iqr:.0%} of the median), "
            f"p99/p50 {tail:.2f}; mean {self.mean * ms:.2f} +- {self.std * ms:.2f} ms; "
            f"{self.throughput:.1f} items/s at the median",
        ]
        if any(v is not None for v in (self.device, self.threads, self.cpu_s, self.load)):
            busy = "cores busy unknown" if cores is None else f"{cores:.2f} cores busy"
            threads = "?" if self.threads is None else self.threads
            lines.append(
                f"  ran on: device {self.device or '?'}; {threads} thread(s) given; {busy} "
                "(computing or spinning)" + (f"; {self.load.describe()}" if self.load else "")
            )
        if self.noisy:
            lines.append(
                f"  WARNING: the IQR is {self.relative_iqr:.0%} of the median "
                f"(over {SPREAD_WARNING:.0%}): the calls did not take a steady time (a busy machine, "
                "frequency scaling, too few runs); differences smaller than this spread are noise."
            )
        if self.contended:
            lines.append(f"  WARNING: CONTENDED: {self.load.describe()}")  # type: ignore[union-attr]
        # the book's column is PAGE_COLUMNS wide: wrap rather than scroll sideways
        return "\n".join(
            textwrap.fill(line, width=PAGE_COLUMNS, subsequent_indent="    ") for line in lines
        )


@dataclass(frozen=True)
class RatioSummary:
    """A speedup from interleaved rounds: the median of the per-round ratios, their p25-p75."""

    median: float
    p25: float
    p75: float
    rounds: int
    ratios: tuple[float, ...]

    SPREAD: ClassVar[str] = "per-round IQR"  # a table's column of :attr:`interval`
    interval = property(lambda self: f"{self.p25:.2f}-{self.p75:.2f}")  # '1.70-1.95'

    @property
    def conclusive(self) -> bool:
        """True when the per-round interval (p25-p75) lies wholly above or below 1."""
        return self.p25 > 1.0 or self.p75 < 1.0

    @property
    def reading(self) -> str:
        """``'faster'`` or ``'slower'`` when the interval lies on one side of 1, else ``'inconclusive'``."""
        return "inconclusive" if not self.conclusive else "faster" if self.p25 > 1.0 else "slower"

    @property
    def short(self) -> str:
        """``'1.84x (1.70-1.95)'``: the median and the per-round interquartile range."""
        return f"{self.median:.2f}x ({self.interval})"

    def apart_from(self, other: RatioSummary) -> bool:
        """True when the two per-round intervals (p25-p75) do not meet: the ratios differ."""
        return self.p75 < other.p25 or other.p75 < self.p25

    @property
    def spread(self) -> str:
        """``'per-round IQR 1.70-1.95'``: the one spelling of a ratio's spread in words."""
        return f"{self.SPREAD} {self.interval}"

    def verdict(self, faster: str = "faster", slower: str = "slower") -> str:
        """``'1.84x faster'``, ``'0.91x slower'``, or ``'inconclusive (...)'`` when the interval holds 1."""
        if not self.conclusive:
            return f"inconclusive ({self.median:.2f}x, {self.spread})"
        return f"{self.median:.2f}x {faster if self.p25 > 1.0 else slower}"

    @property
    def stated(self) -> str:
        """:meth:`verdict` with its :attr:`spread` always said: how the pages' sentences read it."""
        return self.verdict() + (f" ({self.spread})" if self.conclusive else "")

    def __str__(self) -> str:
        return f"{self.median:.2f}x ({self.spread}, {self.rounds} rounds)"

    def as_record(self) -> dict[str, Any]:
        """The ledger's fields for this ratio: value (the median), unit, p25, p75, rounds."""
        return {
            "value": self.median,
            "unit": "x",
            "p25": self.p25,
            "p75": self.p75,
            "rounds": self.rounds,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RatioSummary:
        """The ratio back from :meth:`as_record`'s fields (without the per-round ratios)."""
        return cls(rec["value"], rec["p25"], rec["p75"], rec["rounds"], ())


def paired_ratio(baseline: Measurement, other: Measurement) -> RatioSummary:
    """How many times faster ``other`` ran than ``baseline`` (per item): round *i*'s ratio is
    baseline time *i* / other time *i* of one interleaved run, under the same load, so their
    spread is the *speedup's*, which the two measurements' own spreads overstate."""
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


def measurement_from_dict(d: dict[str, Any]) -> Measurement:
    """A :class:`Measurement` back from ``as_dict()`` plus ``times_s`` (what a subprocess returns)."""
    load = d.get("load")
    given = ("items", "framework", "warmup", "threads", "device", "cpu_s")
    return Measurement(
        label=d["label"],
        times_s=list(d["times_s"]),
        **{k: d[k] for k in given if k in d},
        wall_s=(d["cpu_s"] / d["cores_used"]) if d.get("cores_used") else None,
        load=load and MachineLoad(**{f.name: load[f.name] for f in fields(MachineLoad)}),
    )
