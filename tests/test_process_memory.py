"""helpers.core.process_memory: the one sampler of a process tree's peak memory."""

from __future__ import annotations

import subprocess
import sys

from helpers.core.process_memory import TreeMemory


def test_tree_memory_counts_child_processes():
    """A grandchild's 200 MiB shows in the tree, without the parent, and as the largest one."""
    child = (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', "
        "'x = bytearray(200 << 20); import time; time.sleep(2)'])"
    )
    proc = subprocess.Popen([sys.executable, "-c", child])
    with TreeMemory(proc.pid, every=0.1) as mem:
        proc.wait()
    assert mem.peak_children > 150 * 2**20  # the grandchild's 200 MiB
    assert mem.peak >= mem.peak_children
    assert 150 * 2**20 < mem.largest <= mem.peak_children
