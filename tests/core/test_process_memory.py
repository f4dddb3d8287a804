"""helpers.core.process_memory: the one sampler of a process tree's peak memory."""

from __future__ import annotations

import subprocess
import sys
import time

from helpers.core.process_memory import TreeMemory


def test_tree_memory_counts_child_processes():
    """A grandchild's 200 MiB shows in the tree, without the parent, and as the largest one."""
    child = (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', "
        "'x = bytearray(200 << 20); import time; time.sleep(2)'])"
    )
    proc = subprocess.Popen([sys.executable, "-c", child])
    started = time.time()
    with TreeMemory(proc.pid, every=0.1) as mem:
        proc.wait()
    assert mem.peak_children > 150 * 2**20  # the grandchild's 200 MiB
    assert started < mem.peak_at < time.time()  # when the tree held it
    assert mem.peak >= mem.peak_children
    assert 150 * 2**20 < mem.largest <= mem.peak_children


def test_tree_memory_counts_shared_pages_once():
    """Three forked processes share one 300 MiB buffer: the PSS sum counts it about once, the
    RSS sum three times (the figure forked workers would inflate without PSS)."""
    code = (
        "import os, time\n"
        "x = b'1' * (300 << 20)  # resident, then shared copy-on-write\n"
        "if os.fork() and os.fork():\n"
        "    os.wait(); os.wait()\n"
        "else:\n"
        "    time.sleep(1.5)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    with TreeMemory(proc.pid, every=0.1) as mem:
        proc.wait()
    assert mem.pss, "PSS could not be read on this machine"
    assert mem.peak_rss > 2 * 300 * 2**20  # at least two processes counted it in full
    assert mem.peak < 0.6 * mem.peak_rss  # the PSS sum counts the shared buffer once
