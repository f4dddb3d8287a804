"""The container's own CPU quota, CPU time and memory limit, read from its cgroup.

In a container on a shared host (a rented GPU's JupyterLab, a hub), ``/proc/stat`` and
``/proc/meminfo`` usually describe the whole host, and the affinity mask lists every host CPU
when the platform limits CPU time by a quota rather than by a set of CPUs. The container's own
figures are in its cgroup: cgroup v2 ``cpu.max`` (quota and period), ``cpu.stat``
(``usage_usec``) and ``memory.max``; cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
``cpuacct.usage`` (nanoseconds) and ``memory.limit_in_bytes``. A limit set on a parent cgroup
binds too, so limits are the tightest from this process's cgroup up to the mount's root.
Standard library only: ``tools/doctor.py`` loads this file before anything is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ROOT",
    "Cgroup",
    "find",
    "cpu_quota",
    "cpu_usage_s",
    "memory_limit",
]

ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712 on 4 KiB
# pages); anything at or above this is no limit.
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class Cgroup:
    """Where this process's cgroup files are: for each controller, its folder and the parents up to
    the controller's mount (v2: one folder serves all; v1: one mount per controller)."""

    version: int  # 1 or 2
    cpu: tuple[Path, ...]  # own folder first, then its parents up to the mount
    cpuacct: tuple[Path, ...]  # v1's CPU-time controller (v2: the same folders as cpu)
    memory: tuple[Path, ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_paths(self_cgroup: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; the v2 line ``0::/path`` under ``""``."""
    paths: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _chain(mount: Path, path: str) -> tuple[Path, ...]:
    """The cgroup's folder under ``mount`` and its parents up to ``mount``: ``mount/path`` where it
    exists, else the mount itself (a container with its own cgroup namespace sees its cgroup as
    the root). Empty when there is no such mount."""
    if not mount.is_dir():
        return ()
    folder = mount / path.strip("/")
    if not folder.is_dir():
        folder = mount
    chain = [folder]
    while chain[-1] != mount:
        chain.append(chain[-1].parent)
    return tuple(chain)


def find(root: Path | str = ROOT, self_cgroup: str | None = None) -> Cgroup | None:
    """This process's cgroup (None off Linux or without a cgroup mount), under ``root`` as
    ``self_cgroup`` (the text of ``/proc/self/cgroup``) names it: v2 where
    ``root/cgroup.controllers`` exists, else v1 (``root/cpu``, ``root/cpuacct``, ``root/memory``,
    or a combined ``cpu,cpuacct``)."""
    root = Path(root)
    if self_cgroup is None:
        self_cgroup = _read(Path("/proc/self/cgroup")) or ""
    paths = _own_paths(self_cgroup)
    if (root / "cgroup.controllers").is_file():
        chain = _chain(root, paths.get("", "/"))
        return Cgroup(2, chain, chain, chain)

    def v1(controller: str) -> tuple[Path, ...]:
        for name in (controller, "cpu,cpuacct", "cpuacct,cpu"):
            if (root / name).is_dir():
                key = next((k for k in paths if controller in k.split(",")), None)
                return _chain(root / name, paths[key] if key else "/")
        return ()

    found = Cgroup(1, v1("cpu"), v1("cpuacct"), v1("memory"))
    return found if (found.cpu or found.cpuacct or found.memory) else None


def cpu_quota(cg: Cgroup | None) -> float | None:
    """CPUs' worth of time the cgroup may use per period (``cpu.max`` 200000 100000: 2.0), the
    tightest over the cgroup and its parents; None when no quota is set (or no cgroup)."""
    if cg is None:
        return None
    quotas = []
    for folder in cg.cpu:
        if cg.version == 2:
            text = _read(folder / "cpu.max") or "max"
            quota, _, period = text.partition(" ")
        else:
            quota = _read(folder / "cpu.cfs_quota_us") or "-1"
            period = _read(folder / "cpu.cfs_period_us") or "0"
        if quota != "max" and int(quota) > 0 and period and int(period) > 0:
            quotas.append(int(quota) / int(period))
    return min(quotas) if quotas else None


def cpu_usage_s(cg: Cgroup | None) -> float | None:
    """CPU seconds every process of the cgroup used so far (v2 ``cpu.stat`` usage_usec, v1
    ``cpuacct.usage``); None when the file is missing."""
    if cg is None:
        return None
    if cg.version == 2:
        text = _read(cg.cpu[0] / "cpu.stat") if cg.cpu else None
        for line in (text or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None
    text = _read(cg.cpuacct[0] / "cpuacct.usage") if cg.cpuacct else None
    return int(text) / 1e9 if text else None


def memory_limit(cg: Cgroup | None) -> int | None:
    """Bytes the cgroup may use (``memory.max``, v1 ``memory.limit_in_bytes``), the tightest over
    the cgroup and its parents; None when unlimited (or no cgroup)."""
    if cg is None:
        return None
    limits = []
    for folder in cg.memory:
        text = _read(folder / ("memory.max" if cg.version == 2 else "memory.limit_in_bytes"))
        if text and text != "max" and text.isdigit() and int(text) < _V1_UNLIMITED:
            limits.append(int(text))
    return min(limits) if limits else None
