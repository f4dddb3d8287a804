"""helpers.core.hardware: what this machine is."""

from __future__ import annotations

from helpers.core import hardware


def test_host_memory_prefers_a_lower_container_limit(tmp_path):
    meminfo = "MemTotal:       263842304 kB\nMemFree: 1 kB\n"  # a 251.6 GiB host
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "memory.max").write_text(f"{16 << 30}\n")
    assert hardware.host_memory(meminfo, tmp_path, "0::/\n") == (
        16 << 30,
        "the container's cgroup limit",
    )
    (tmp_path / "memory.max").write_text("max\n")
    assert hardware.host_memory(meminfo, tmp_path, "0::/\n") == (263842304 * 1024, "MemTotal")
