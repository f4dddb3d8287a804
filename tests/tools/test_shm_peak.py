"""tools/shm_peak.py: a chapter's own /dev/shm, each shared object counted once."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("shm_peak", ROOT / "tools" / "shm_peak.py")
shm_peak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shm_peak)

MIB = 2**20


def test_each_object_counts_once_at_its_largest_mapping():
    one = "7f0000000000-7f0000100000 rw-s 00000000 00:1a 101 /dev/shm/torch_1 (deleted)\n"
    two = (
        "7f1000000000-7f1000200000 rw-s 00000000 00:1a 101 /dev/shm/torch_1 (deleted)\n"  # same
        "7f2000000000-7f2000300000 rw-s 00000000 00:1a 202 /dev/shm/triton_python_backend_shm\n"
        "7f3000000000-7f3000400000 r-xp 00000000 08:01 303 /usr/lib/libc.so.6\n"  # not shm
    )
    assert shm_peak.shm_mapped([1, 2], {1: one, 2: two}) == 2 * MIB + 3 * MIB
    assert shm_peak.shm_mapped([1], {1: one}) == 1 * MIB


def test_a_real_shared_memory_block_is_seen():
    from multiprocessing import shared_memory

    block = shared_memory.SharedMemory(create=True, size=4 * MIB)
    try:
        assert shm_peak.shm_mapped([os.getpid()]) >= 4 * MIB
    finally:
        block.close()
        block.unlink()


def test_record_keeps_the_passing_chapters(tmp_path):
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"quick": {}}))
    run = {
        "what": "w",
        "machine": {"cpu": "X"},
        "date": "2026-12-03",
        "chapters": {
            "09_triton_serving": {"passed": True, "shm_peak_mib": 8.0},
            "05_parallelism": {"passed": False, "shm_peak_mib": 99.0},
        },
    }
    measured = tmp_path / "shm.json"
    measured.write_text(json.dumps(run))
    got = shm_peak.record(measured, times)
    assert got["mib"] == {"09_triton_serving": 8.0} and got["date"] == "2026-12-03"
    assert json.loads(times.read_text())["quick_shm"] == got
