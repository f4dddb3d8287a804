"""helpers.core.machine_needs: what full mode needs (generated from the measurements), and the rule
that compares a machine with it; tools/machine_needs.py keeps the two in step."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

from helpers.core import machine_needs as mn

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def _tool():
    spec = importlib.util.spec_from_file_location(
        "machine_needs_tool", ROOT / "tools" / "machine_needs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_needs_match_the_committed_measurements():
    tool = _tool()
    assert not tool.check(), "NEEDS is stale: run python tools/machine_needs.py write"
    # from the measurements, not typed: the heaviest full-size chapter's peak, every chapter's
    needs = tool.needs()
    assert mn.NEEDS == needs
    assert needs["full_host_gib"] == max(needs["full_host_by_chapter"].values())
    assert needs["full_gpu_gib"] > 0 and needs["quick_host_gib"] < needs["full_host_gib"]


def test_stale_needs_are_caught(tmp_path):
    """A new measurement (a heavier chapter 10) makes the committed block stale."""
    tool = _tool()
    times = json.loads((ROOT / "results/reference/chapter_times.json").read_text())
    est = times["gpu_estimate_source"].split(" ")[0]
    copies = [
        "results/reference/chapter_times.json",
        est,
        "src/helpers/core/machine_needs.py",
        *(
            p.relative_to(ROOT).as_posix()
            for p in ROOT.glob("results/reference/*-full-cpu/full_cpu.json")
        ),
    ]
    for rel in copies:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert not tool.check(tmp_path)
    run = next(tmp_path.glob("results/reference/*-full-cpu/full_cpu.json"))
    data = json.loads(run.read_text())
    data["chapters"]["10_capstone"]["peak_pss_mib"] = 30 * 1024
    run.write_text(json.dumps(data))
    assert tool.check(tmp_path)
    assert tool.write(tmp_path) and not tool.check(tmp_path)
    assert 'full_host_gib": 30.0' in (tmp_path / "src/helpers/core/machine_needs.py").read_text()


@pytest.mark.parametrize(
    ("host_gib", "gpu_gib", "fits", "why"),
    [
        (64, 24, True, "hold full mode"),
        (64, 8, False, "the GPU has 8.0 GiB"),  # a laptop's 8 GB card
        (16, 24, False, "16.0 GiB of RAM"),  # a 16 GB rental with a 24 GB card
        (None, 24, True, "hold full mode"),  # host memory unknown (not Linux): not held against it
        (64, None, False, "no CUDA GPU"),  # an instance started without its card
    ],
)
def test_full_mode_fits(host_gib, gpu_gib, fits, why):
    host = None if host_gib is None else host_gib * GIB
    gpu = None if gpu_gib is None else gpu_gib * GIB
    got, text = mn.full_mode_fits(host, gpu)
    assert got is fits and why in text


def test_the_rule_sits_at_the_needs():
    need_gpu = math.ceil(mn.NEEDS["full_gpu_gib"] * GIB)
    need_host = math.ceil(mn.NEEDS["full_host_gib"] * GIB)
    assert mn.full_mode_fits(need_host, need_gpu)[0]
    assert not mn.full_mode_fits(need_host, need_gpu - GIB // 10)[0]
    assert not mn.full_mode_fits(need_host - GIB // 10, need_gpu)[0]


def test_chapters_above_a_rental():
    above = mn.chapters_above(12)
    assert above and above[0][0] == mn.NEEDS["full_host_chapter"]
    assert all(v > 12 for _, v in above) and above == sorted(above, key=lambda kv: -kv[1])
