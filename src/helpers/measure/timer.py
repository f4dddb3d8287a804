"""Honest timing of a callable: warm-up, synchronisation, repetitions, interleaved rounds.

Chapter 0 writes the timing loop on its page (:func:`time_loop`, copied by ``tools/save_cells.py``);
:func:`benchmark_interleaved` wraps it with checks, progress bars and where the calls ran, and
returns a :class:`~helpers.measure.measurement.Measurement` per variant.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from helpers.core.checks import check_int
from helpers.core.threads import framework_threads
from helpers.measure import machine
from helpers.measure.machine import LoadProbe
from helpers.measure.measurement import Measurement

__all__ = [
    "synchronize",
    "time_loop",
    "benchmark",
    "time_calls",
    "benchmark_interleaved",
    "round_orders",
]

FRAMEWORKS = ("torch", "oneflow", "onnxruntime", "openvino", "numpy", "triton", "none")


def synchronize(framework: str) -> None:
    """Wait until all work queued by ``framework`` has finished: PyTorch on CUDA and OneFlow (even
    on CPU) return before it is done. ONNX Runtime, OpenVINO, NumPy: synchronous."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use one of {', '.join(FRAMEWORKS)}")
    if framework == "torch":
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    elif framework == "oneflow":
        flow = sys.modules.get("oneflow")
        if flow is not None:
            flow._oneflow_internal.eager.Sync()


def benchmark(
    fn: Callable[[], Any],
    *,
    label: str = "call",
    framework: str = "torch",
    warmup: int = 3,
    repeats: int = 10,
    items: int = 1,
    progress: bool = False,
    threads: int | None = None,
    device: str | None = None,
) -> Measurement:
    """Time ``fn()``, ``warmup`` untimed calls then ``repeats`` timed: :func:`benchmark_interleaved`
    with one variant (``items`` per call, for throughput)."""
    return benchmark_interleaved(
        {label: fn},
        framework=framework,
        warmup=warmup,
        repeats=repeats,
        items=items,
        progress=progress,
        threads=threads,
        device=device,
    )[label]


def time_calls(fn: Callable[[], Any], n: int, *, framework: str = "torch") -> list[float]:
    """Seconds taken by each of ``n`` consecutive calls, with no warm-up (to *see* warm-up)."""
    check_int("n", n)  # time_loop waits for earlier queued work before the first call
    return time_loop(fn, warmup=0, repeats=n, sync=lambda: synchronize(framework))


def _each(name: str, value: Any, labels: Sequence[str]) -> dict[str, Any]:
    """One value for every variant, or a mapping that names each of them."""
    if not isinstance(value, dict):
        return dict.fromkeys(labels, value)
    missing = [label for label in labels if label not in value]
    if missing:
        raise ValueError(f"no {name} given for variant(s) {missing}")
    return {label: value[label] for label in labels}


def benchmark_interleaved(
    fns: dict[str, Callable[[], Any]],
    *,
    framework: str | dict[str, str] = "torch",
    warmup: int = 2,
    repeats: int = 10,
    items: int | dict[str, int] = 1,
    progress: bool = False,
    apart: Sequence[tuple[str, str]] = (),
    seed: int = 0,
    threads: int | dict[str, int | None] | None = None,
    device: str | dict[str, str] | None = None,
) -> dict[str, Measurement]:
    """Time several variants in rounds, one synchronised call of each per round; a Measurement
    each, with its own CPU time and the machine's load over the run.

    A burst of background load hits every variant alike, so the *ratios* between variants are far
    more stable than with one :func:`benchmark` after another (:func:`paired_ratio`). Each round
    runs in a fresh seeded order (:func:`round_orders`): no variant always first, last, or after
    the neighbour whose caches it would inherit. ``framework``, ``items``, ``threads`` (default:
    :func:`framework_threads`) and ``device``: one value, or a mapping ``label -> value``.
    """
    if not fns:
        raise ValueError("nothing to benchmark: give at least one labelled callable")
    for label, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"variant {label!r} is not callable ({type(fn).__name__})")
    n_items, fws = _each("items", items, list(fns)), _each("framework", framework, list(fns))
    given, devices = _each("threads", threads, list(fns)), _each("device", device, list(fns))
    check_int("repeats", repeats, why="at least one timed call is needed")
    check_int("warmup", warmup, minimum=0)
    for fw in set(fws.values()):
        synchronize(fw)  # validates every name before any work
    waits = {label: (lambda fw=fws[label]: synchronize(fw)) for label in fns}
    for label, fn in fns.items():
        time_loop(fn, warmup=warmup, repeats=0, sync=waits[label])  # warm-up, then synchronise
    times: dict[str, list[float]] = {label: [] for label in fns}
    cpu, wall = dict.fromkeys(fns, 0.0), dict.fromkeys(fns, 0.0)
    orders: Any = round_orders(list(fns), repeats, apart=apart, seed=seed)
    if progress:
        from tqdm.auto import tqdm

        orders = tqdm(orders, desc=", ".join(fns)[:40], leave=False)
    probe = LoadProbe().start()
    for order in orders:
        for label in order:
            c0, w0 = machine.READERS.process_cpu_s(), machine.READERS.wall_s()
            times[label] += time_loop(fns[label], warmup=0, repeats=1, sync=waits[label])
            cpu[label] += machine.READERS.process_cpu_s() - c0
            wall[label] += machine.READERS.wall_s() - w0
    load = probe.stop()
    return {
        label: Measurement(
            label=label,
            times_s=times[label],
            items=n_items[label],
            framework=fws[label],
            warmup=warmup,
            threads=framework_threads(fws[label]) if given[label] is None else given[label],
            device=devices[label],
            cpu_s=cpu[label],
            wall_s=wall[label],
            load=load,
        )
        for label in fns
    }


def round_orders(
    labels: Sequence[str], rounds: int, *, apart: Sequence[tuple[str, str]] = (), seed: int = 0
) -> list[list[str]]:
    """The order of ``labels`` in each of ``rounds`` interleaved rounds.

    A seeded random permutation per round, redrawn until no pair of ``apart`` is adjacent (within
    the round, or across two rounds) and no round starts with the variant that ended the last.
    """
    labels = list(labels)
    check_int("rounds", rounds, minimum=0)
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be unique, got {labels}")
    for pair in apart:
        if len(pair) != 2 or any(x not in labels for x in pair):
            raise ValueError(f"apart takes pairs of known labels, got {pair!r}")
    banned = {frozenset(p) for p in apart}
    if any(len(p) == 1 for p in banned):
        raise ValueError("a variant cannot be kept apart from itself")
    if banned and len(labels) < 3:
        raise ValueError("keeping two variants apart needs a third to put between them")
    rng = random.Random(seed)
    out: list[list[str]] = []
    for _ in range(rounds):
        for _attempt in range(10_000):
            perm = rng.sample(labels, len(labels))
            if out and len(labels) > 1 and perm[0] == out[-1][-1]:
                continue
            seq = (out[-1][-1:] if out else []) + perm
            if any(frozenset(seq[i : i + 2]) in banned for i in range(len(seq) - 1)):
                continue
            out.append(perm)
            break
        else:
            raise ValueError(f"no order of {labels} keeps {list(apart)} apart")
    return out


# ---- saved from notebooks/00_measuring.ipynb by tools/save_cells.py: edit it there ----
def time_loop(
    fn: Callable[[], Any],
    *,
    warmup: int,
    repeats: int,
    sync: Callable[[], Any] | None,
) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn()``, after ``warmup`` untimed.

    ``sync()`` waits until the work ``fn`` queued has finished
    (``torch.cuda.synchronize`` on a GPU, OneFlow's ``eager.Sync()``). ``None`` reads
    the clock as soon as ``fn`` returns, which measures how fast work is *queued*: only
    useful to show that lie. Written on chapter 0's page; :func:`benchmark` calls it.
    """
    for _ in range(warmup):  # 1. warm up, untimed: allocation, kernel choice, caches
        fn()
    if sync is not None:
        sync()  # the warm-up's queued work must not leak into the first timed call
    times = []
    for _ in range(repeats):
        start = time.perf_counter()  # 2. a monotonic clock with the finest resolution
        fn()
        if sync is not None:
            sync()  # 3. wait for the work, not the queueing, before reading the clock
        times.append(time.perf_counter() - start)  # 4. keep every call's time
    return times


# ---- end of cells saved from notebooks/00_measuring.ipynb ----
