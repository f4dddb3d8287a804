"""helpers.perf.batch_sweep: sweep tables, BatchNorm batch (in)dependence, GPU utilisation sampling."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from helpers.core.benchmarking import Measurement
from helpers.perf import batch_sweep
from helpers.workload import models


def test_sweep_rows():
    rows = batch_sweep.sweep_rows({4: Measurement("b4", [0.02]), 1: Measurement("b1", [0.01])})
    assert [r["batch"] for r in rows] == [1, 4]
    assert rows[1]["images_per_s"] == pytest.approx(200) and rows[1][
        "ms_per_image"
    ] == pytest.approx(5)
    assert rows[1]["throughput_gain"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no measurements"):
        batch_sweep.sweep_rows({})
    with pytest.raises(ValueError, match="positive ints"):
        batch_sweep.sweep_rows({0: Measurement("b0", [0.01])})


def test_batchnorm_eval_is_batch_independent_train_is_not(torch_mod):
    torch_mod.manual_seed(0)
    model = models.build_resnet("torch", "resnet18", num_classes=4).eval()
    x = torch_mod.from_numpy(
        np.random.default_rng(0).normal(size=(4, 3, 32, 32)).astype(np.float32)
    )
    ev = batch_sweep.batch_dependence(model, x, [1, 2, 4])
    assert ev[1] == 0.0 and max(ev.values()) < 1e-4
    tr = batch_sweep.batch_dependence(model, x, [2, 4], train_mode=True)
    assert tr[2] == 0.0 and tr[4] > 1e-2
    assert not model.training  # the caller's model is untouched
    with pytest.raises(ValueError, match="at least 8 samples"):
        batch_sweep.batch_dependence(model, x, [8])
    with pytest.raises(ValueError, match="batch of 1"):
        batch_sweep.batch_dependence(model, x, [1, 2], train_mode=True)
    with pytest.raises(ValueError, match="positive ints"):
        batch_sweep.batch_dependence(model, x, [])
    with pytest.raises(TypeError, match="torch.nn.Module"):
        batch_sweep.batch_dependence("model", x, [1])


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the no-GPU error path")
def test_gpu_utilisation_needs_nvidia_smi():
    with pytest.raises(RuntimeError, match="nvidia-smi not found"):
        batch_sweep.GpuUtilisation()


def test_gpu_utilisation_bad_interval():
    with pytest.raises(ValueError, match="interval_s"):
        batch_sweep.GpuUtilisation(interval_s=0)


def test_fastest_thread_count(torch_mod):
    before = torch_mod.get_num_threads()
    seen = []
    best, times = batch_sweep.fastest_thread_count(
        lambda: seen.append(torch_mod.get_num_threads()), [1, 2], warmup=1, repeats=2
    )
    assert (
        best in (1, 2) and set(times) == {1, 2} and all(len(m.times_s) == 2 for m in times.values())
    )
    assert set(seen) == {1, 2}  # each candidate really ran with its thread count
    assert torch_mod.get_num_threads() == before  # restored
    with pytest.raises(ValueError, match="positive thread counts"):
        batch_sweep.fastest_thread_count(lambda: None, [0])
    with pytest.raises(ValueError, match="positive thread counts"):
        batch_sweep.fastest_thread_count(lambda: None, [])
