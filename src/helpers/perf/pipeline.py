"""A two-stage inference pipeline: CPU pre-processing overlapped with model execution.

A service receives encoded images. Each batch must be *loaded* (JPEG decode, resize,
normalise: CPU work) and then *inferred* (the network: GPU work in the case study). Run one
after the other, the accelerator idles while the CPU loads and vice versa. Three runners:

- :func:`run_serial` -- load, infer, load, infer ... in this process (the baseline);
- :func:`run_two_process` -- the case study's fix: N worker processes, each loading its next
  batch under a shared lock (so only one process loads at a time) and then running the model,
  so one process's loading overlaps another's inference;
- :func:`run_dataloader` -- the standard tool: ``torch.utils.data.DataLoader`` workers load and
  prefetch batches (pinned memory on a GPU) while this process runs the model.

Every runner records a timeline of :class:`StageEvent` (who did what, when) for
:func:`helpers.core.plots.plot_timeline`, and returns the logits in batch order so the pipelined
results can be checked against the serial ones. Bad inputs (no workers, no images) raise at
once; a stuck or crashed worker raises ``TimeoutError`` / ``RuntimeError`` instead of hanging.
Timestamps are ``time.time()`` (one clock for all processes of the machine).
"""

from __future__ import annotations

import queue as queue_mod
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core import scratch
from helpers.workload.data import decode_image, encode_jpeg, make_images, normalize, resize


@dataclass(frozen=True)
class StageEvent:
    """One stage of one batch: ``lane`` (who), ``stage`` ('load' or 'infer'), start/end seconds."""

    lane: str
    stage: str
    batch: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


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

    def logits(self) -> np.ndarray:
        """All outputs concatenated in batch order (whatever order the workers finished in)."""
        missing = [i for i in range(len(self.outputs)) if i not in self.outputs]
        if missing:
            raise RuntimeError(f"{self.name}: batches {missing[:5]} produced no output")
        return np.concatenate([self.outputs[i] for i in range(len(self.outputs))])

    def busy_fraction(self, stage: str) -> float:
        """Share of the wall time during which at least one ``stage`` event was running."""
        spans = sorted((e.start, e.end) for e in self.events if e.stage == stage)
        if not spans:
            raise ValueError(f"no {stage!r} events in {self.name}")
        covered, cur_s, cur_e = 0.0, *spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                covered += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        covered += cur_e - cur_s
        return covered / self.wall_s

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.items} images in {self.wall_s:.2f} s = {self.throughput:.1f} images/s "
            f"({len(self.outputs)} batches)"
        )


def make_jpeg_dataset(n: int, size: int, *, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``n`` generated images of ``size`` x ``size`` pixels, JPEG-encoded (the service's input files)."""
    images, _ = make_images(n, size, seed=seed)
    return encode_jpeg(images, quality=quality)


def load_batch(jpegs: Sequence[bytes], indices: Sequence[int], image_size: int) -> np.ndarray:
    """The CPU stage: decode, resize and normalise ``jpegs[indices]`` into a float32 NCHW batch."""
    if len(indices) == 0:
        raise ValueError("a batch needs at least one image index")
    return normalize(np.stack([resize(decode_image(jpegs[i]), image_size) for i in indices]))


def make_batches(n: int, batch_size: int) -> list[list[int]]:
    """Index lists of consecutive batches (the last one may be smaller)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]


def _check_common(jpegs: Sequence[bytes], batch_size: int, image_size: int) -> list[list[int]]:
    if jpegs is None or len(jpegs) == 0:
        raise ValueError("the dataset is empty: the pipeline needs at least one encoded image")
    if not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
    if not all(isinstance(b, (bytes, bytearray)) for b in jpegs):
        raise TypeError(
            "the dataset must be a sequence of encoded image bytes (see make_jpeg_dataset)"
        )
    return make_batches(len(jpegs), batch_size)


def _check_workers(workers: Any, what: str) -> None:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        hint = (
            " (0 workers would mean no pipeline at all: use run_serial for the serial baseline)"
            if workers == 0
            else ""
        )
        raise ValueError(f"{what} must be a positive int, got {workers!r}{hint}")


def _infer(model: Any, x: np.ndarray, device: Any) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return (
            model(torch.from_numpy(x).to(device)).float().cpu().numpy()
        )  # .cpu() waits for the GPU


def run_serial(
    model: Any,
    jpegs: Sequence[bytes],
    *,
    batch_size: int,
    image_size: int,
    device: Any = "cpu",
    threads: int | None = None,
    warmup: int = 1,
) -> PipelineRun:
    """Load a batch, run the model on it, repeat: one process, nothing overlaps.

    ``threads`` sets PyTorch's intra-op threads for the run (restored afterwards);
    ``warmup`` batches are run first, untimed.
    """
    import torch

    batches = _check_common(jpegs, batch_size, image_size)
    model = model.eval().to(device)
    saved = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    try:
        for idx in batches[:warmup]:
            _infer(model, load_batch(jpegs, idx, image_size), device)
        events, outputs = [], {}
        t0 = time.time()
        for b, idx in enumerate(batches):
            s = time.time()
            x = load_batch(jpegs, idx, image_size)
            m = time.time()
            outputs[b] = _infer(model, x, device)
            e = time.time()
            events += [StageEvent("main", "load", b, s, m), StageEvent("main", "infer", b, m, e)]
        wall = time.time() - t0
    finally:
        torch.set_num_threads(saved)
    return PipelineRun("serial", events, outputs, wall, len(jpegs), {"threads": threads or saved})


def _case_study_worker(
    wid: int,
    payload: str,
    batches: list[list[int]],
    image_size: int,
    device: str,
    threads: int,
    lock: Any,
    next_batch: Any,
    go: Any,
    out_q: Any,
) -> None:
    """One worker process of the case study: lock, take + load the next batch, unlock, infer, repeat."""
    try:
        import pickle

        import torch

        torch.set_num_threads(threads)
        with open(payload, "rb") as fh:
            model, jpegs = pickle.load(fh)
        model = model.eval().to(device)
        _infer(model, load_batch(jpegs, batches[0], image_size), device)  # warm-up, untimed
        out_q.put(("ready", wid, None))
        go.wait()
        while True:
            with lock:  # only one process loads at a time; the others run their model meanwhile
                b = next_batch.value
                if b >= len(batches):
                    break
                next_batch.value = b + 1
                s = time.time()
                x = load_batch(jpegs, batches[b], image_size)
                m = time.time()
            y = _infer(model, x, device)
            e = time.time()
            lane = f"process {wid}"
            out_q.put(
                (
                    "result",
                    wid,
                    (b, y, [StageEvent(lane, "load", b, s, m), StageEvent(lane, "infer", b, m, e)]),
                )
            )
        out_q.put(("done", wid, None))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent, never hang it
        out_q.put(("error", wid, traceback.format_exc()))


def run_two_process(
    model: Any,
    jpegs: Sequence[bytes],
    *,
    batch_size: int,
    image_size: int,
    workers: int = 2,
    threads_per_worker: int = 1,
    device: str = "cpu",
    timeout_s: float = 60.0,
    startup_timeout_s: float = 180.0,
) -> PipelineRun:
    """The case study's pipeline: ``workers`` processes share a lock around data loading.

    Workers are started with ``spawn`` (safe with threads and CUDA), load a copy of ``model`` and
    the images from a temporary file (a big start-up message would block the parent if a worker
    died while reading it) and warm up before the clock starts. ``startup_timeout_s`` bounds the start-up (importing
    PyTorch, copying the model); ``timeout_s`` bounds the wait for any next batch. A worker
    that raises, dies or stalls stops the run with a clear error; workers are always cleaned up.
    """
    import multiprocessing as mp
    import pickle

    batches = _check_common(jpegs, batch_size, image_size)
    _check_workers(workers, "workers")
    _check_workers(threads_per_worker, "threads_per_worker")
    if timeout_s <= 0 or startup_timeout_s <= 0:
        raise ValueError("timeouts must be positive seconds")
    ctx = mp.get_context("spawn")
    lock, go, out_q = ctx.Lock(), ctx.Event(), ctx.Queue()
    next_batch = ctx.Value("i", 0)
    tmp = scratch.scratch_dir(
        "pipeline-"
    )  # removed below, or by the next scratch_dir call if this kernel is killed
    payload = f"{tmp}/payload.pkl"
    procs = [
        ctx.Process(
            target=_case_study_worker,
            daemon=True,
            name=f"pipeline-worker-{w}",
            args=(
                w,
                payload,
                batches,
                image_size,
                str(device),
                threads_per_worker,
                lock,
                next_batch,
                go,
                out_q,
            ),
        )
        for w in range(workers)
    ]

    def get(timeout: float, waiting_for: str) -> tuple[str, int, Any]:
        deadline = time.time() + timeout
        while True:
            try:
                msg = out_q.get(timeout=min(1.0, max(0.01, deadline - time.time())))
            except queue_mod.Empty:
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(
                        f"pipeline worker {dead[0].name} died (exit code {dead[0].exitcode}) "
                        f"while {waiting_for}"
                    ) from None
                if time.time() >= deadline:
                    raise TimeoutError(
                        f"no pipeline worker reported within {timeout:.0f} s while {waiting_for}; "
                        "a worker is stuck (the run was stopped)"
                    ) from None
                continue
            if msg[0] == "error":
                raise RuntimeError(f"pipeline worker {msg[1]} failed:\n{msg[2]}")
            return msg

    try:
        with open(payload, "wb") as fh:
            pickle.dump((model.eval().cpu(), list(jpegs)), fh, protocol=pickle.HIGHEST_PROTOCOL)
        launched = time.time()
        for p in procs:
            p.start()
        ready = 0
        while ready < workers:
            kind, _, _ = get(startup_timeout_s, "starting the workers")
            ready += kind == "ready"
        t0 = time.time()
        startup = t0 - launched
        go.set()
        events, outputs, done = [], {}, 0
        while done < workers:
            kind, _, body = get(
                timeout_s, f"waiting for batch results ({len(outputs)}/{len(batches)} done)"
            )
            if kind == "result":
                b, y, evs = body
                outputs[b] = y
                events += evs
            elif kind == "done":
                done += 1
        wall = max(e.end for e in events) - t0
    finally:
        started = [p for p in procs if p.pid is not None]
        for p in started:
            p.join(timeout=5)
        for p in started:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        scratch.remove_scratch(tmp)
    return PipelineRun(
        f"{workers} processes + lock",
        events,
        outputs,
        wall,
        len(jpegs),
        {"workers": workers, "threads_per_worker": threads_per_worker, "startup_s": startup},
    )


class JpegDataset:
    """A map-style dataset of encoded images; each item is pre-processed when it is fetched.

    Items are ``(image (3, H, W) float32 tensor, load start, load end, worker id)`` so the
    DataLoader's timeline can be recorded across its worker processes.
    """

    def __init__(self, jpegs: Sequence[bytes], image_size: int) -> None:
        _check_common(jpegs, 1, image_size)
        self.jpegs = list(jpegs)
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, i: int) -> tuple[Any, float, float, int]:
        import torch
        from torch.utils.data import get_worker_info

        s = time.time()
        x = torch.from_numpy(load_batch(self.jpegs, [i], self.image_size)[0])
        info = get_worker_info()
        return x, s, time.time(), info.id if info is not None else -1


def run_dataloader(
    model: Any,
    jpegs: Sequence[bytes],
    *,
    batch_size: int,
    image_size: int,
    num_workers: int = 2,
    device: Any = "cpu",
    prefetch_factor: int = 2,
    pin_memory: bool | None = None,
    threads: int | None = None,
    timeout_s: float = 60.0,
    multiprocessing_context: str | None = None,
) -> PipelineRun:
    """The standard tool: a ``DataLoader`` with ``num_workers`` loading processes feeds the model.

    ``pin_memory`` defaults to True on CUDA (page-locked host memory makes the copy to the GPU
    faster and asynchronous) and False on CPU, where it does nothing useful. ``timeout_s`` is the
    DataLoader's own per-batch timeout: a stuck worker raises instead of hanging.
    """
    import torch
    from torch.utils.data import DataLoader

    batches = _check_common(jpegs, batch_size, image_size)
    _check_workers(num_workers, "num_workers")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive seconds")
    device = torch.device(device)
    if pin_memory is None:
        pin_memory = device.type == "cuda"
    loader = DataLoader(
        JpegDataset(jpegs, image_size),
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        pin_memory=pin_memory,
        timeout=timeout_s,
        multiprocessing_context=multiprocessing_context,
        persistent_workers=False,
    )
    model = model.eval().to(device)
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    events, outputs = [], {}
    try:
        with torch.inference_mode():
            warm = np.zeros((len(batches[0]), 3, image_size, image_size), dtype=np.float32)
            _infer(model, warm, device)  # warm the model, not the loader
            t0 = time.time()
            for b, (x, starts, ends, wids) in enumerate(loader):
                m = time.time()
                y = model(x.to(device, non_blocking=pin_memory)).float().cpu().numpy()
                e = time.time()
                outputs[b] = y
                wid = int(wids[0])
                events += [
                    StageEvent(
                        f"loader worker {wid}", "load", b, float(starts.min()), float(ends.max())
                    ),
                    StageEvent("main", "infer", b, m, e),
                ]
            wall = time.time() - t0
    finally:
        torch.set_num_threads(saved)
    if len(outputs) != len(batches):
        raise RuntimeError(
            f"the DataLoader delivered {len(outputs)} batches, expected {len(batches)}"
        )
    return PipelineRun(
        f"DataLoader, {num_workers} workers",
        events,
        outputs,
        wall,
        len(jpegs),
        {"num_workers": num_workers, "pin_memory": pin_memory, "prefetch_factor": prefetch_factor},
    )


def speedup_table(
    runs: Sequence[PipelineRun], baseline: PipelineRun | None = None
) -> list[dict[str, Any]]:
    """Rows (run, images/s, speedup vs ``baseline`` (default: the first), infer-stage busy share)."""
    if not runs:
        raise ValueError("no runs to tabulate")
    base = baseline or runs[0]
    return [
        {
            "run": r.name,
            "images_per_s": r.throughput,
            "speedup": r.throughput / base.throughput,
            "model_busy": f"{min(1.0, r.busy_fraction('infer')):.0%}",
        }
        for r in runs
    ]
