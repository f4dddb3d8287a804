"""The machine's load while something was timed, and the one rule that calls it contended.

:class:`LoadProbe` reads the CPU time *other* processes took on this process's CPUs over a timed
region: in a container whose cgroup sets a CPU quota (where ``/proc/stat`` counts the whole host),
the cgroup's CPU time; else ``/proc/stat``'s busy time over the affinity mask, plus steal on a VM;
either minus this process's and its children's. :class:`MachineLoad` applies the rule.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from helpers.core import cgroup
from helpers.core.threads import affinity

__all__ = [
    "MachineLoad",
    "LoadProbe",
    "measured_loads",
]

# Contended: others (or, on a VM, the hypervisor's other guests: steal) took more CPU time than
# this share of one core over the wall time, beyond /proc/stat's tick resolution. The same 10% as
# SPREAD_WARNING: losing 10% of one core's time can slow a program by up to about 10%, which is
# already noise; below it, others cannot make a difference we would report. Interleaving does not
# protect a ratio: runtimes that use more cores or memory bandwidth suffer unequally.
CONTENDED_SHARE = 0.10


def read_proc_stat(
    text: str | None = None, cpus: Collection[int] | None = None
) -> tuple[int, int] | None:
    """(busy ticks, steal ticks) from ``/proc/stat``'s ``cpu`` line, or summed over the lines of
    ``cpus``; None where it cannot be read. Guest time is inside user; steal is time the
    hypervisor ran other guests on our CPUs. ``text`` replaces the file (tests)."""
    if text is None:
        try:
            with open("/proc/stat") as f:
                text = f.read()
        except OSError:
            return None
    wanted = ["cpu"] if cpus is None else [f"cpu{n}" for n in sorted(set(cpus))]
    rows = [line.split() for line in text.splitlines()]
    rows = [[int(x) for x in r[1:]] + [0] * 10 for r in rows if r and r[0] in wanted]
    if cpus is None and not rows:
        raise ValueError("/proc/stat has no aggregate 'cpu' line")
    if len(rows) != len(wanted):
        raise ValueError(f"/proc/stat lists {len(rows)} of the CPUs {wanted}")
    # user + nice + system + irq + softirq; idle (3) and iowait (4) are not busy; 7 is steal
    busy = sum(r[0] + r[1] + r[2] + r[5] + r[6] for r in rows)
    steal = sum(r[7] for r in rows)
    return busy, steal


def _own_cpus_stat() -> tuple[int, int] | None:
    """``/proc/stat`` over the CPUs this process may run on (all of them: the aggregate line)."""
    mask = affinity()
    if len(mask) >= (os.cpu_count() or 0):
        return read_proc_stat()
    return read_proc_stat(cpus=mask)


_own_cgroup = lru_cache(maxsize=1)(cgroup.find)  # this process's cgroup, found once


def container_cpu_s(cg: cgroup.Cgroup | None = None) -> float | None:
    """CPU seconds used so far by this container (or cgroup ``cg``) where its cgroup sets a CPU
    quota; None otherwise (``/proc/stat`` over the affinity mask is then its view)."""
    found = _own_cgroup() if cg is None else cg
    return cgroup.cpu_usage_s(found) if cgroup.cpu_quota(found) is not None else None


def _family_cpu_s() -> float:
    """CPU seconds of this process and its children (live ones through psutil, waited ones too)."""
    import psutil

    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + waited.ru_utime + waited.ru_stime
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it ended between the listing and the read
            t = child.cpu_times()
            total += t.user + t.system
    return total


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass
class _Readers:
    """Where :class:`LoadProbe` reads the machine (tests replace these with fakes)."""

    proc_stat: Callable[[], tuple[int, int] | None] = _own_cpus_stat
    container_cpu_s: Callable[[], float | None] = container_cpu_s
    family_cpu_s: Callable[[], float] = _family_cpu_s
    process_cpu_s: Callable[[], float] = time.process_time
    wall_s: Callable[[], float] = time.perf_counter
    loadavg: Callable[[], float | None] = _loadavg
    clock_ticks: int = field(default_factory=lambda: os.sysconf("SC_CLK_TCK"))
    cpus: int = field(default_factory=lambda: len(affinity()))


READERS = _Readers()


@dataclass(frozen=True)
class MachineLoad:
    """The machine's load over one timed region. ``others_cpu_s``: others' CPU time on this
    process's CPUs (read where ``scope`` says); ``resolution_s``: ``/proc/stat`` counts whole
    ticks, about two per CPU per interval. ``contended`` None: unknown, not quiet."""

    wall_s: float
    others_cpu_s: float | None
    steal_s: float | None
    loadavg_before: float | None
    loadavg_after: float | None
    resolution_s: float
    scope: str = "this process's CPUs (/proc/stat)"

    @property
    def others_cores(self) -> float | None:
        """Cores other processes kept busy on average (others' CPU seconds / wall seconds); None
        when unknown or within the counter's resolution: one 10 ms tick over a 41 us region
        would read as 243 cores."""
        if self.others_cpu_s is None or self.others_cpu_s <= self.resolution_s:
            return None
        return self.others_cpu_s / self.wall_s

    @property
    def contended(self) -> bool | None:
        """The rule: others' CPU time > share x wall time (one core) + the counter's resolution."""
        if self.others_cpu_s is None:
            return None
        return self.others_cpu_s > CONTENDED_SHARE * self.wall_s + self.resolution_s

    def as_dict(self) -> dict[str, Any]:
        """Plain numbers for tables and the ledger."""
        names = ("wall_s", "others_cpu_s", "others_cores", "steal_s", "loadavg_before")
        names += ("loadavg_after", "resolution_s", "contended")
        rule = f"others' CPU > {CONTENDED_SHARE:.0%} of one core + {self.resolution_s:.2f} s"
        return {**{k: getattr(self, k) for k in names}, "rule": rule, "scope": self.scope}

    def describe(self) -> str:
        """A short sentence: others' cores, load average, and the verdict."""
        cores = self.others_cores
        la = (
            f"load avg {self.loadavg_before:.2f}->{self.loadavg_after:.2f}"
            if self.loadavg_before is not None and self.loadavg_after is not None
            else "load avg unknown"
        )
        if self.others_cpu_s is None:
            other = "others unknown"
        elif cores is None:
            within = f"{self.resolution_s:.2f} s of CPU over {self.wall_s:.3g} s"
            other = f"other processes within the counter's resolution ({within})"
        else:
            other = f"other processes {cores:.2f} cores"
        verdict = {True: "CONTENDED", False: "quiet", None: "load unknown"}[self.contended]
        return f"{other}, {la}: {verdict}"


# Every MachineLoad this process measured, in order (read it with measured_loads()).
_LOADS: list[MachineLoad] = []


def measured_loads() -> list[MachineLoad]:
    """Every :class:`MachineLoad` this process measured so far, in order (a copy)."""
    return list(_LOADS)


class LoadProbe:
    """Reads the machine (through :data:`READERS`) before and after a timed region; :meth:`stop`
    returns its :class:`MachineLoad` (or ``with LoadProbe() as probe: ...``, then ``probe.load``)."""

    def __init__(self, readers: _Readers | None = None) -> None:
        self.r = readers or READERS
        self.load: MachineLoad | None = None

    # The wall clock just outside the machine's counters and this process's own CPU read last at
    # both ends: the probe's own reading (psutil lists every process, about a millisecond) falls
    # inside the family's window or outside all, never into others' CPU time or off the wall's.
    def start(self) -> LoadProbe:
        self._la0 = self.r.loadavg()
        self._t0 = self.r.wall_s()
        self._cg0 = self.r.container_cpu_s()
        self._stat0 = self.r.proc_stat() if self._cg0 is None else None
        self._fam0 = self.r.family_cpu_s()
        return self

    def stop(self) -> MachineLoad:
        cg1 = self.r.container_cpu_s() if self._cg0 is not None else None
        stat1 = self.r.proc_stat() if self._cg0 is None else None
        wall = self.r.wall_s() - self._t0
        fam = self.r.family_cpu_s() - self._fam0
        tick = 1.0 / self.r.clock_ticks
        others = steal = None
        scope = MachineLoad.scope
        if self._cg0 is not None:
            scope = "this container (its cgroup's CPU time; it has a CPU quota)"
            if cg1 is not None:
                others = max(0.0, (cg1 - self._cg0) - fam)
        elif self._stat0 is not None and stat1 is not None:
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
            scope=scope,
        )
        _LOADS.append(self.load)
        return self.load

    def __enter__(self) -> LoadProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
