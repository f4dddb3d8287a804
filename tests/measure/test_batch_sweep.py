"""helpers.measure.batch_sweep: sweep tables, GPU utilisation sampling, the fastest thread count."""

from __future__ import annotations

import shutil

import pytest

from helpers.core.threads import available_cores
from helpers.measure import batch_sweep
from helpers.measure.measurement import Measurement


def test_sweep_rows():
    rows = batch_sweep.sweep_rows({4: Measurement("b4", [0.02]), 1: Measurement("b1", [0.01])})
    assert [r["batch"] for r in rows] == [1, 4]
    assert rows[1]["images_per_s"] == pytest.approx(200) and rows[1][
        "ms_per_image"
    ] == pytest.approx(5)
    assert rows[1]["throughput_gain"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no measurements"):
        batch_sweep.sweep_rows({})
    with pytest.raises(ValueError, match="batch size must be a positive int"):
        batch_sweep.sweep_rows({0: Measurement("b0", [0.01])})


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the no-GPU error path")
def test_gpu_utilisation_needs_nvidia_smi():
    with pytest.raises(RuntimeError, match="nvidia-smi not found"):
        batch_sweep.GpuUtilisation()


def test_gpu_utilisation_bad_interval():
    with pytest.raises(ValueError, match="sampling interval must be positive"):
        batch_sweep.GpuUtilisation(interval_s=0)


def test_fastest_thread_count(torch_mod):
    before = torch_mod.get_num_threads()
    seen = []
    best, times = batch_sweep.fastest_thread_count(
        lambda: seen.append(torch_mod.get_num_threads()), [1, 2], repeats=2
    )
    assert (
        best in (1, 2) and set(times) == {1, 2} and all(len(m.times_s) == 2 for m in times.values())
    )
    assert set(seen) == {1, 2}  # each candidate really ran with its thread count
    # and each measurement states its own count (not the count PyTorch was left with)
    assert {t: m.threads for t, m in times.items()} == {1: 1, 2: 2}
    assert torch_mod.get_num_threads() == before  # restored
    with pytest.raises(ValueError, match="thread count must be a positive int"):
        batch_sweep.fastest_thread_count(lambda: None, [0])
    with pytest.raises(ValueError, match="no candidate thread counts"):
        batch_sweep.fastest_thread_count(lambda: None, [])


def test_fastest_thread_count_default_candidates(torch_mod):
    _, times = batch_sweep.fastest_thread_count(lambda: None, repeats=1)
    assert set(times) == {1, torch_mod.get_num_threads(), available_cores()}
