"""helpers.chapters.ch05_pipeline: chapter 5's serial, two-process (lock), replicas and DataLoader pipelines; bad inputs never hang.

The model stage is chapter 4's pruned task (logits and input-gradient saliency maps); the test that
compares it with ``helpers.workload.saliency`` imports oneflow, so this file is in the oneflow group.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from helpers.chapters import ch05_pipeline as pl
from helpers.core.threads import torch_threads
from helpers.workload import data

SIZE = 32


class TinyNet(torch.nn.Module):
    """A small deterministic model, in eval mode with frozen weights (the pruned task's module);
    spawned workers import it from this module."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 3)
        self.eval().requires_grad_(False)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))


class StallsAfterWarmup(TinyNet):
    """Answers its first call (the worker's warm-up), then hangs: a stuck worker."""

    calls = 0

    def forward(self, x):
        type(self).calls += 1
        if type(self).calls > 1:
            time.sleep(3600)
        return super().forward(x)


class Fails(TinyNet):
    def forward(self, x):
        raise RuntimeError("model exploded")


@pytest.fixture(scope="module")
def jpegs():
    return data.make_jpeg_dataset(10, 2 * SIZE, seed=0)


def test_load_batch_and_batches(jpegs):
    x = data.load_batch(jpegs, [0, 1, 2], SIZE)
    assert x.shape == (3, 3, SIZE, SIZE) and x.dtype == np.float32
    assert data.make_batches(10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError, match="batch_size"):
        data.make_batches(10, 0)
    with pytest.raises(ValueError, match="at least one image"):
        data.load_batch(jpegs, [], SIZE)


def test_infer_is_chapter_4s_pruned_task(jpegs):
    from helpers.workload import saliency  # (imports oneflow)

    x = data.load_batch(jpegs, [0, 1, 2], SIZE)
    logits, maps = pl.infer(TinyNet(), x, "cpu")
    want = saliency.single_forward_task(TinyNet(), torch.from_numpy(x))
    np.testing.assert_array_equal(logits, want.logits.numpy())
    np.testing.assert_array_equal(maps, want.saliency.numpy())
    assert maps.shape == (3, SIZE, SIZE) and (maps >= 0).all() and maps.max() > 0
    net = TinyNet()
    pl.infer(net, x, "cpu")
    assert all(p.grad is None for p in net.parameters())  # no weight gradient computed


def test_task_module_is_checked(jpegs):
    trainable = TinyNet().requires_grad_(True)
    with pytest.raises(ValueError, match="weights require grad"):
        pl.run_serial(trainable, pl.Job(jpegs, 4, SIZE))
    with pytest.raises(ValueError, match="eval mode"):
        pl.run_dataloader(TinyNet().train(), pl.Job(jpegs, 4, SIZE))
    with pytest.raises(TypeError, match="nn.Module"):
        pl.check_task_module(lambda x: x)


def test_serial_run_and_timeline(jpegs):
    run = pl.run_serial(TinyNet(), pl.Job(jpegs, 4, SIZE))
    assert run.items == 10 and len(run.outputs) == 3 and run.logits().shape == (10, 3)
    assert run.saliency().shape == (10, SIZE, SIZE)
    assert [(e.stage, e.batch) for e in run.events[:2]] == [("load", 0), ("infer", 0)]
    assert all(e.end >= e.start for e in run.events)
    assert 0 < run.busy_fraction("infer") <= 1.0 and run.throughput > 0
    with pytest.raises(ValueError, match="no 'decode' events"):
        run.busy_fraction("decode")


def test_pipelines_match_serial(jpegs):
    serial = pl.run_serial(TinyNet(), pl.Job(jpegs, 4, SIZE))
    two = pl.run_two_process(TinyNet(), pl.Job(jpegs, 4, SIZE), workers=2, timeout_s=60)
    import psutil

    def live_children():
        kids = psutil.Process().children(recursive=True)
        return {c.pid for c in kids if c.is_running() and c.status() != psutil.STATUS_ZOMBIE}

    before = live_children()
    loader = pl.run_dataloader(TinyNet(), pl.Job(jpegs, 4, SIZE), num_workers=2, timeout_s=60)
    left_running = live_children() - before
    for run in (two, loader):
        np.testing.assert_allclose(run.logits(), serial.logits(), atol=1e-5)
        np.testing.assert_allclose(run.saliency(), serial.saliency(), atol=1e-6)
        assert {e.stage for e in run.events} == {"load", "infer"}
    assert {e.lane for e in two.events} <= {"process 0", "process 1"}
    # the lock: loads never overlap, whichever process ran them (chapter 5 asserts it too)
    loads = sorted((e.start, e.end) for e in two.events if e.stage == "load")
    assert len(loads) == 3 and all(end <= start for (_, end), (start, _) in zip(loads, loads[1:]))
    assert two.meta["startup_s"] > 0 and set(loader.meta) == {
        "num_workers",
        "pin_memory",
        "startup_s",
    }
    # start-up measured apart, and the persistent workers stopped when the run ended
    assert loader.meta["startup_s"] > 0
    assert not left_running, f"DataLoader workers still running: {left_running}"


def test_replicas_control_runs_the_same_task_without_the_lock(jpegs):
    serial = pl.run_serial(TinyNet(), pl.Job(jpegs, 2, SIZE))
    replicas = pl.run_two_process(TinyNet(), pl.Job(jpegs, 2, SIZE), with_lock=False, timeout_s=60)
    assert replicas.name == "2 replicas, no lock" and replicas.meta["lock"] is False
    np.testing.assert_allclose(replicas.logits(), serial.logits(), atol=1e-5)
    np.testing.assert_allclose(replicas.saliency(), serial.saliency(), atol=1e-6)
    # every batch exactly once, by whichever replica was free
    assert sorted(e.batch for e in replicas.events if e.stage == "load") == list(range(5))
    assert {e.lane for e in replicas.events} <= {"process 0", "process 1"}
    locked = pl.run_two_process(TinyNet(), pl.Job(jpegs, 2, SIZE))
    assert locked.name == "2 processes + lock" and locked.meta["lock"] is True


def test_busy_fraction_counts_covered_time_once():
    ev = [
        pl.StageEvent("a", "load", 0, 0.0, 1.0),
        pl.StageEvent("a", "infer", 0, 1.0, 3.0),
        pl.StageEvent("b", "load", 1, 1.0, 2.0),  # under a's infer
        pl.StageEvent(
            "b", "infer", 1, 2.0, 4.0
        ),  # 2.0-3.0 under a's infer: same stage, not counted
    ]
    run = pl.PipelineRun("toy", ev, {0: np.zeros((1, 2)), 1: np.ones((1, 2))}, 4.0, 2)
    assert run.busy_fraction("infer") == pytest.approx(3 / 4)
    assert run.logits().shape == (2, 2)
    with pytest.raises(ValueError, match="not \\(logits, saliency\\) pairs"):
        run.saliency()
    pairs = pl.PipelineRun(
        "toy",
        ev,
        {1: (np.ones((1, 2)), np.ones((1, 4, 4))), 0: (np.zeros((1, 2)), np.zeros((1, 4, 4)))},
        4.0,
        2,
    )
    assert pairs.logits()[0].tolist() == [0, 0] and pairs.saliency().shape == (2, 4, 4)


def test_torch_threads_restores_the_count(torch_mod):
    before = torch_mod.get_num_threads()
    with torch_threads(1):
        assert torch_mod.get_num_threads() == 1
    with torch_threads(None):
        assert torch_mod.get_num_threads() == before
    assert torch_mod.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be a positive int"):
        with torch_threads(0):
            pass


@pytest.mark.parametrize("runner", [pl.run_serial, pl.run_two_process, pl.run_dataloader])
def test_empty_dataset_is_rejected(runner):
    with pytest.raises(ValueError, match="dataset is empty"):
        runner(TinyNet(), pl.Job([], 4, SIZE))


def test_zero_workers_are_rejected_at_once(jpegs):
    start = time.time()
    with pytest.raises(ValueError, match="0 workers would mean no pipeline"):
        pl.run_two_process(TinyNet(), pl.Job(jpegs, 4, SIZE), workers=0)
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        pl.run_dataloader(TinyNet(), pl.Job(jpegs, 4, SIZE), num_workers=0)
    with pytest.raises(ValueError, match="workers must be a positive int"):
        pl.run_two_process(TinyNet(), pl.Job(jpegs, 4, SIZE), workers=-2)
    with pytest.raises(TypeError, match="encoded image bytes"):
        pl.run_serial(TinyNet(), pl.Job([np.zeros(3)], 4, SIZE))
    assert time.time() - start < 5


def test_failing_worker_raises_with_its_traceback(jpegs):
    with pytest.raises(RuntimeError, match="model exploded"):
        pl.run_two_process(Fails(), pl.Job(jpegs, 4, SIZE), workers=1, timeout_s=30)


def test_stuck_worker_times_out_instead_of_hanging(jpegs):
    start = time.time()
    with pytest.raises(TimeoutError, match="stuck"):
        pl.run_two_process(StallsAfterWarmup(), pl.Job(jpegs, 4, SIZE), workers=1, timeout_s=2)
    assert time.time() - start < 90


@pytest.mark.skipif(
    __import__("multiprocessing").get_start_method() != "fork",
    reason="the stuck loader is injected by monkeypatching, which only forked workers inherit",
)
def test_dataloader_surfaces_bad_images_and_stalls(jpegs, monkeypatch):
    with pytest.raises(ValueError, match="cannot decode image"):
        pl.run_dataloader(TinyNet(), pl.Job([b"not an image"] * 4, 2, SIZE), num_workers=1)

    def stuck(*args, **kwargs):
        time.sleep(3600)

    monkeypatch.setattr(pl, "load_batch", stuck)  # forked loader workers inherit the stuck loader
    start = time.time()
    with pytest.raises(RuntimeError, match="timed out"):
        pl.run_dataloader(TinyNet(), pl.Job(jpegs, 2, SIZE), num_workers=1, timeout_s=2)
    assert time.time() - start < 30


def test_dataloader_workers_stop_when_the_model_fails(jpegs):
    import psutil

    def live_children():
        kids = psutil.Process().children(recursive=True)
        return {c.pid for c in kids if c.is_running() and c.status() != psutil.STATUS_ZOMBIE}

    before = live_children()
    with pytest.raises(RuntimeError, match="model exploded") as failure:
        pl.run_dataloader(Fails(), pl.Job(jpegs, 4, SIZE), num_workers=2)
    # the traceback (kept in `failure`) holds the loader: only an explicit shutdown stops them
    assert failure.traceback and not (live_children() - before)
