"""helpers.core.cgroup on fake cgroup trees: the container's CPU quota, CPU time and memory limit,
and what the thread count and the contended rule read from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.core import cgroup, threads
from helpers.measure import machine

V2_SELF = "0::/user.slice/course.scope\n"
V1_SELF = "4:memory:/docker/abc\n3:cpuacct:/docker/abc\n2:cpu:/docker/abc\n1:cpuset:/\n"


def v2_tree(root: Path, cpu_max: str = "400000 100000", memory_max: str = "8589934592") -> Path:
    """A cgroup v2 mount with this process in user.slice/course.scope (limits on both levels)."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    parent = root / "user.slice"
    own = parent / "course.scope"
    own.mkdir(parents=True)
    (parent / "cpu.max").write_text("max 100000\n")
    (parent / "memory.max").write_text("max\n")
    (own / "cpu.max").write_text(cpu_max + "\n")
    (own / "memory.max").write_text(memory_max + "\n")
    (own / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    return own


def v1_tree(root: Path, quota: int = 150000, period: int = 100000) -> None:
    """cgroup v1: one mount per controller, this process in /docker/abc under each."""
    for c in ("cpu", "cpuacct", "memory"):
        (root / c / "docker" / "abc").mkdir(parents=True)
    (root / "cpu" / "docker" / "abc" / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu" / "docker" / "abc" / "cpu.cfs_period_us").write_text(f"{period}\n")
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # the host's root: no quota
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpuacct" / "docker" / "abc" / "cpuacct.usage").write_text("7000000000\n")
    (root / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(
        "9223372036854771712\n"  # v1's "unlimited"
    )
    (root / "memory" / "docker" / "memory.limit_in_bytes").write_text(f"{16 << 30}\n")


def test_v2_quota_usage_and_memory(tmp_path):
    v2_tree(tmp_path)
    cg = cgroup.find(tmp_path, V2_SELF)
    assert cg is not None and cg.version == 2
    assert cgroup.cpu_quota(cg) == 4.0  # 400000 / 100000; the parent's "max" is no limit
    assert cgroup.cpu_usage_s(cg) == pytest.approx(2.5)
    assert cgroup.memory_limit(cg) == 8 << 30


def test_v2_tighter_parent_limit_binds(tmp_path):
    own = v2_tree(tmp_path)
    (own.parent / "cpu.max").write_text("150000 100000\n")  # the slice allows 1.5 CPUs
    (own.parent / "memory.max").write_text(f"{4 << 30}\n")
    cg = cgroup.find(tmp_path, V2_SELF)
    assert cgroup.cpu_quota(cg) == 1.5 and cgroup.memory_limit(cg) == 4 << 30


def test_v2_no_limits_and_namespaced_root(tmp_path):
    v2_tree(tmp_path, cpu_max="max 100000", memory_max="max")
    cg = cgroup.find(tmp_path, V2_SELF)
    assert cgroup.cpu_quota(cg) is None and cgroup.memory_limit(cg) is None
    # a container with its own cgroup namespace reads "0::/" and finds its files at the root
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 1000000\n")
    cg = cgroup.find(tmp_path, "0::/\n")
    assert cg.cpu == (tmp_path,) and cgroup.cpu_quota(cg) == 2.0
    assert cgroup.cpu_usage_s(cg) == pytest.approx(1.0)


def test_v1_quota_usage_and_memory(tmp_path):
    v1_tree(tmp_path)
    cg = cgroup.find(tmp_path, V1_SELF)
    assert cg is not None and cg.version == 1
    assert cgroup.cpu_quota(cg) == 1.5  # the root's -1 is no quota
    assert cgroup.cpu_usage_s(cg) == pytest.approx(7.0)  # cpuacct.usage is in nanoseconds
    assert cgroup.memory_limit(cg) == 16 << 30  # the parent's limit; the own one is "unlimited"
    v1_none = tmp_path / "none"
    v1_tree(v1_none, quota=-1)
    assert cgroup.cpu_quota(cgroup.find(v1_none, V1_SELF)) is None


def test_no_cgroup_mount(tmp_path):
    assert cgroup.find(tmp_path / "missing", V2_SELF) is None
    assert cgroup.cpu_quota(None) is None and cgroup.cpu_usage_s(None) is None


def test_threads_capped_by_the_quota(tmp_path, monkeypatch):
    """64 CPUs in the affinity mask, 4 CPUs' worth of quota: 4 threads (without the cap: 64)."""
    v2_tree(tmp_path)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert threads.available_cores(tmp_path, V2_SELF) == 4
    (tmp_path / "user.slice" / "course.scope" / "cpu.max").write_text("50000 100000\n")
    assert threads.available_cores(tmp_path, V2_SELF) == 1  # half a CPU: still one thread
    (tmp_path / "user.slice" / "course.scope" / "cpu.max").write_text("max 100000\n")
    assert threads.available_cores(tmp_path, V2_SELF) == 64  # no quota: the mask
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    (tmp_path / "user.slice" / "course.scope" / "cpu.max").write_text("800000 100000\n")
    assert threads.available_cores(tmp_path, V2_SELF) == 2  # a quota above the mask: the mask


STAT = (
    "cpu  300 0 30 900 0 0 0 9 0 0\n"
    "cpu0 100 0 10 300 0 0 0 3 0 0\n"
    "cpu1 100 0 10 300 0 0 0 3 0 0\n"
    "cpu2 100 0 10 300 0 0 0 3 0 0\n"
)


def test_proc_stat_over_the_affinity_mask_only():
    assert machine.read_proc_stat(STAT) == (330, 9)  # the aggregate line
    assert machine.read_proc_stat(STAT, cpus={0, 2}) == (220, 6)  # a cpuset of two CPUs
    with pytest.raises(ValueError, match="lists 1 of the CPUs"):
        machine.read_proc_stat(STAT, cpus={0, 7})


def test_container_cpu_time_only_with_a_quota(tmp_path):
    own = v2_tree(tmp_path)
    cg = cgroup.find(tmp_path, V2_SELF)
    assert machine.container_cpu_s(cg) == pytest.approx(2.5)
    (own / "cpu.max").write_text("max 100000\n")
    assert machine.container_cpu_s(cg) is None  # no quota: /proc/stat over the mask instead


def test_contended_rule_reads_the_container_not_the_host(fake_machine):
    """In a container with a quota the host's other tenants are not others: only the container's
    own other processes are. The fake host is busy (/proc/stat) while the container is quiet."""
    fake = fake_machine
    container = {"cpu_s": 100.0}
    fake.readers.container_cpu_s = lambda: container["cpu_s"]
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=30.0)  # the host: 30 cores of other tenants
    container["cpu_s"] += 1.0 + 0.02  # the container: our second plus 2% of a core
    quiet = probe.stop()
    assert quiet.contended is False and quiet.others_cpu_s == pytest.approx(0.02)
    assert "container" in quiet.as_dict()["scope"]
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=0.0)
    container["cpu_s"] += 1.0 + 0.5  # another kernel in the same container took half a core
    busy = probe.stop()
    assert busy.contended is True and busy.others_cpu_s == pytest.approx(0.5)
    fake.readers.container_cpu_s = lambda: None  # control: the host's /proc/stat
    probe = machine.LoadProbe(fake.readers).start()
    fake.run(wall=1.0, own=1.0, others=30.0)
    assert probe.stop().contended is True


def test_the_machine_reads_the_threads_affinity_mask(monkeypatch):
    """One reader of the mask: the load's CPU count and the thread count both follow it."""
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0})
    assert threads.affinity() == {0} and machine._Readers().cpus == 1
    assert threads.available_cores() == 1
    monkeypatch.setattr(machine, "read_proc_stat", lambda text=None, cpus=None: cpus)
    assert machine._own_cpus_stat() == {0}  # /proc/stat read over cpu0's line only
