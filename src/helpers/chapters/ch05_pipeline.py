"""A two-stage inference pipeline: CPU pre-processing (*load*) overlapped with the model (*infer*).

Chapter 5 writes its runners on its page (saved at the end of this module): serial, two processes
under a shared lock (the case study's fix) and ``DataLoader`` workers. They live in a module
because a ``forkserver`` worker imports its target function. Timestamps are ``time.time()``: one
clock for all processes of the machine.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from helpers.core.checks import check_int
from helpers.core.threads import torch_threads
from helpers.core.worker_pool import WorkerPool
from helpers.workload.data import check_dataset, load_batch

__all__ = [
    "Job",
    "StageEvent",
    "PipelineRun",
    "infer",
    "forward",
    "JpegDataset",
    "start_loader_workers",
    "stopping_workers",
    "run_serial",
    "case_study_worker",
    "run_two_process",
    "run_dataloader",
]


def infer(model: Any, x: Any, device: Any) -> tuple[np.ndarray, np.ndarray]:
    """The model stage, chapter 4's pruned task: a batch in, (logits, saliency maps) out, NumPy.

    :func:`helpers.workload.saliency.single_forward_task`'s steps, written out so that worker
    processes need not import OneFlow (that module does). ``.cpu()`` waits for a GPU to finish,
    so a stage's end time is the end of its work.
    """
    x = torch.as_tensor(x).to(device).requires_grad_(True)
    logits = model(x)  # forward
    logits.max(dim=1)[0].sum().backward()  # backward, to the input only (frozen weights)
    saliency = x.grad.abs().max(dim=1)[0]
    return logits.detach().float().cpu().numpy(), saliency.float().cpu().numpy()


def forward(model: Any, x: Any, device: Any) -> np.ndarray:
    """The forward-only stage (a service that only classifies): a batch in, its logits out, NumPy."""
    with torch.inference_mode():
        return model(torch.as_tensor(x).to(device)).float().cpu().numpy()


def check_stage(stage: Callable[..., Any]) -> None:
    """Check that worker processes can import ``stage`` (it is pickled by name): a function at
    the top of a module, not a lambda, a nested function or one defined in a notebook."""
    name = getattr(stage, "__qualname__", "")
    module = getattr(stage, "__module__", None)
    if not callable(stage) or "<" in name or "." in name or module in (None, "__main__"):
        where = "this notebook or script" if module == "__main__" else f"{module}.{name}"
        raise ValueError(
            f"the model stage must be a function defined at the top level of an importable "
            f"module (worker processes import it), not {where}: e.g. ch05_pipeline.infer, "
            "ch05_pipeline.forward, or a function in a .py file of your own"
        )


@dataclass(frozen=True)
class Job:
    """What a pipeline runner processes: ``jpegs`` (encoded images) loaded in batches of
    ``batch_size`` at ``image_size`` pixels, the model run on ``device`` by ``stage(model, x,
    device)``: :func:`infer` (the default), :func:`forward`, or your own (:func:`check_stage`).
    """

    jpegs: Sequence[bytes]
    batch_size: int
    image_size: int
    device: Any = "cpu"
    stage: Callable[..., Any] = infer

    def __post_init__(self) -> None:
        check_stage(self.stage)

    def check(self, model: Any) -> None:
        """Check ``model`` for this stage: eval mode; frozen weights too for :func:`infer`."""
        check_task_module(model, frozen=self.stage is infer)

    def batches(self) -> list[list[int]]:
        """The index lists of the batches, once the dataset and sizes are checked."""
        return check_dataset(self.jpegs, self.batch_size, self.image_size)

    def load(self, indices: Sequence[int]) -> np.ndarray:
        """The CPU stage for the images ``indices``: decode, resize, normalise."""
        return load_batch(self.jpegs, indices, self.image_size)


@dataclass(frozen=True)
class StageEvent:
    """One stage of one batch: ``lane`` (who), ``stage`` ('load' or 'infer'), start/end seconds."""

    lane: str
    stage: str
    batch: int
    start: float
    end: float


def _covered(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    covered, reached = 0.0, float("-inf")
    for s, e in sorted(spans):  # by start: count only what lies beyond the spans before
        covered += max(0.0, e - max(s, reached))
        reached = max(reached, e)
    return covered


@dataclass
class PipelineRun:
    """The result of one pipeline run: timeline, outputs in batch order, wall time."""

    name: str
    events: list[StageEvent]
    outputs: dict[int, np.ndarray]
    wall_s: float
    items: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Images per second over the whole run."""
        return self.items / self.wall_s

    def _part(self, k: int) -> np.ndarray:
        missing = [i for i in range(len(self.outputs)) if i not in self.outputs]
        if missing:
            raise RuntimeError(f"{self.name}: batches {missing[:5]} produced no output")
        parts = [self.outputs[i] for i in range(len(self.outputs))]
        pairs = all(isinstance(p, tuple) for p in parts)
        if k and not pairs:
            raise ValueError(f"{self.name}: outputs are arrays, not (logits, saliency) pairs")
        return np.concatenate([p[k] for p in parts] if pairs else parts)

    def logits(self) -> np.ndarray:
        """All logits in batch order (whatever order the workers finished in), from outputs that
        are logits or ``(logits, saliency)`` pairs."""
        return self._part(0)

    def saliency(self) -> np.ndarray:
        """All saliency maps ``(N, H, W)`` in batch order (outputs must be ``(logits, saliency)``)."""
        return self._part(1)

    def busy_fraction(self, stage: str) -> float:
        """Share of the wall time during which at least one ``stage`` event was running."""
        spans = [(e.start, e.end) for e in self.events if e.stage == stage]
        if not spans:
            raise ValueError(f"no {stage!r} events in {self.name}")
        return _covered(spans) / self.wall_s


def check_task_module(model: Any, frozen: bool = True) -> None:
    """Check that ``model`` is an eval-mode module, with frozen weights when ``frozen`` (the
    pruned task: it computes the input's gradient only; a weight that requires grad would add
    every weight's gradient, the unpruned task, and accumulate it from call to call)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError(
            "the model must be in eval mode (call .eval()): in train mode BatchNorm mixes "
            "the images of a batch"
        )
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if frozen and trainable:
        raise ValueError(
            f"{len(trainable)} weights require grad (e.g. {trainable[0]}): the pruned task "
            "freezes them; pass helpers.workload.saliency.make_task(model, "
            "'single_forward').module"
        )


class JpegDataset(torch.utils.data.Dataset):
    """The encoded images, each loaded when fetched: ``(image, load start, load end, worker id)``
    (the times and the worker, ``-1`` for the main process, only draw the timeline)."""

    def __init__(self, jpegs: Sequence[bytes], image_size: int) -> None:
        check_dataset(jpegs, 1, image_size)
        self.jpegs, self.image_size = list(jpegs), image_size

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, float, float, int]:
        start = time.time()
        x = torch.from_numpy(load_batch(self.jpegs, [i], self.image_size)[0])
        info = torch.utils.data.get_worker_info()  # which loader process runs this
        return x, start, time.time(), info.id if info is not None else -1


def start_loader_workers(loader: DataLoader, warm_up: Callable[[Any], Any]) -> float:
    """One untimed pass over ``loader`` (starting its persistent workers), ``warm_up(first
    batch)`` at the timed pass's thread count; returns the seconds until the first batch."""
    t0 = time.time()
    startup = float("nan")
    for b, (x, *_) in enumerate(loader):
        if b == 0:
            startup = time.time() - t0
            warm_up(x)
    return startup


@contextmanager
def stopping_workers(loader: DataLoader) -> Iterator[DataLoader]:
    """Stop a ``DataLoader``'s persistent workers when the block ends, also on failure (they
    otherwise live until the loader is garbage-collected, which a traceback can delay)."""
    try:
        yield loader
    finally:
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator._shutdown_workers()


# ---- saved from notebooks/05_parallelism.ipynb by tools/save_cells.py: edit it there ----
def run_serial(model, job, *, threads=None):
    """Load a batch, run the model stage (job.stage, on job.device), repeat."""
    batches = job.batches()
    job.check(model)  # eval mode (and frozen weights for the saliency task)
    with torch_threads(threads):
        job.stage(model, job.load(batches[0]), job.device)  # warm-up, untimed
        events, outputs = [], {}
        t0 = time.time()
        for b, idx in enumerate(batches):
            s = time.time()
            x = job.load(idx)  # the model waits while we load...
            m = time.time()
            # ...and the loader while the model runs
            outputs[b] = job.stage(model, x, job.device)
            e = time.time()
            events += [
                StageEvent("main", "load", b, s, m),
                StageEvent("main", "infer", b, m, e),
            ]
        wall = time.time() - t0
        meta = {"threads": torch.get_num_threads(), "startup_s": 0.0}
    return PipelineRun("serial", events, outputs, wall, len(job.jpegs), meta)


def case_study_worker(
    wid, payload, batches, image_size, device, threads, lock, next_batch, go, out_q
):
    """One of the case study's processes: [lock: take, load the next batch], infer."""
    try:
        torch.set_num_threads(threads)
        with open(payload, "rb") as fh:  # this process's own model, images, stage
            model, jpegs, stage = pickle.load(fh)
        model = model.eval().to(device)
        stage(model, load_batch(jpegs, batches[0], image_size), device)  # warm-up
        out_q.put(("ready", wid, None))
        go.wait()  # every process starts at the same moment
        lane = f"process {wid}"
        while True:
            # only one process loads at a time; the others run their model meanwhile
            with lock:  # the control's is a nullcontext: no lock, replicas
                with next_batch.get_lock():  # take the next batch number
                    b = next_batch.value
                    next_batch.value = b + 1
                if b >= len(batches):
                    break
                s = time.time()
                x = load_batch(jpegs, batches[b], image_size)
                m = time.time()
            y = stage(model, x, device)
            e = time.time()
            events = [
                StageEvent(lane, "load", b, s, m),
                StageEvent(lane, "infer", b, m, e),
            ]
            out_q.put(("result", wid, (b, y, events)))
        out_q.put(("done", wid, None))
    except BaseException:  # every failure must reach the parent, never leave it waiting
        out_q.put(("error", wid, traceback.format_exc()))


def run_two_process(model, job, *, threads_per_worker=1, with_lock=True, workers=2, timeout_s=60.0):
    """The case study's pipeline: `workers` processes, loading under one lock.

    with_lock=False: the control, the same processes without the lock (replicas)."""
    batches = job.batches()
    check_int("threads_per_worker", threads_per_worker)
    job.check(model)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["helpers.chapters.ch05_pipeline"])  # PyTorch, once
    lock = ctx.Lock() if with_lock else nullcontext()  # no lock: replicas
    next_batch, go = ctx.Value("i", 0), ctx.Event()
    size, device = job.image_size, str(job.device)
    args = (batches, size, device, threads_per_worker, lock, next_batch, go)
    payload = (model, list(job.jpegs), job.stage)  # a file every process reads
    with WorkerPool(ctx, case_study_worker, workers, payload, args, timeout_s=timeout_s) as pool:
        pool.wait_ready()  # start-up is not timed
        t0 = time.time()
        go.set()
        events, outputs = [], {}
        for b, y, batch_events in pool.results():
            outputs[b] = y
            events += batch_events
    wall = max(e.end for e in events) - t0
    meta = {"workers": workers, "threads_per_worker": threads_per_worker}
    meta.update(lock=with_lock, startup_s=pool.startup_s)
    name = f"{workers} " + ("processes + lock" if with_lock else "replicas, no lock")
    return PipelineRun(name, events, outputs, wall, len(job.jpegs), meta)


def run_dataloader(model, job, *, num_workers=2, threads=None, timeout_s=60.0):
    """The standard tool: DataLoader workers load and prefetch while this one infers."""
    job.batches()  # checks the dataset and sizes
    check_int("num_workers", num_workers)
    job.check(model)
    loader = DataLoader(
        JpegDataset(job.jpegs, job.image_size),
        batch_size=job.batch_size,
        num_workers=num_workers,
        prefetch_factor=2,  # batches each worker loads ahead
        pin_memory=torch.device(job.device).type == "cuda",  # faster copies to a GPU
        persistent_workers=True,  # the workers outlive a pass over the data
        timeout=timeout_s,  # a stuck worker raises instead of hanging
    )
    events, outputs = [], {}
    with torch_threads(threads), stopping_workers(loader):
        warm_up = partial(job.stage, model, device=job.device)
        startup = start_loader_workers(loader, warm_up)  # untimed: starts the workers
        t0 = time.time()
        for b, (x, starts, ends, wids) in enumerate(loader):
            m = time.time()
            outputs[b] = job.stage(model, x, job.device)
            lane = f"loader worker {int(wids[0])}"  # one worker loads a whole batch
            load = StageEvent(lane, "load", b, float(starts.min()), float(ends.max()))
            events += [load, StageEvent("main", "infer", b, m, time.time())]
        wall = time.time() - t0
    meta = {"num_workers": num_workers, "pin_memory": loader.pin_memory}
    meta["startup_s"] = startup
    name = f"DataLoader, {num_workers} workers"
    return PipelineRun(name, events, outputs, wall, len(job.jpegs), meta)


# ---- end of cells saved from notebooks/05_parallelism.ipynb ----
