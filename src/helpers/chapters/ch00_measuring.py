"""Why OneFlow 0.9.0 is slow on a CPU: appendix A's measurements (its only user).

A matrix product and a ResNet in both frameworks, interleaved, with each thread's CPU time and
the OpenBLAS that OneFlow's wheel bundles (asked through ``ctypes``); :func:`cpu_probe` runs in a
fresh process, which may set another ``OPENBLAS_CORETYPE``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from helpers.core.environment import import_oneflow
from helpers.core.threads import same_threads
from helpers.measure.measurement import RatioSummary
from helpers.measure.timer import benchmark_interleaved, synchronize
from helpers.show.table import Table

__all__ = [
    "oneflow_blas",
    "matmul_pair",
    "cpu_probe",
    "gap_table",
]

# OpenBLAS kernel families, newest first, that OneFlow 0.9.0's bundled OpenBLAS may pick at start-up.
_BLAS_CORES = tuple(
    "SKYLAKEX COOPERLAKE ZEN HASWELL EXCAVATOR STEAMROLLER PILEDRIVER BULLDOZER SANDYBRIDGE "
    "NEHALEM BARCELONA PENRYN DUNNINGTON CORE2 OPTERON_SSE3 OPTERON ATOM NANO BOBCAT PRESCOTT".split()
)
AVX2_BLAS_CORES = frozenset({"SKYLAKEX", "COOPERLAKE", "ZEN", "HASWELL", "EXCAVATOR"})


def oneflow_blas() -> dict[str, Any]:
    """What computes OneFlow's CPU matrix products: the OpenBLAS inside ``liboneflow``, as loaded now.

    Returns the library file, whether that OpenBLAS was built with threads (a threaded build has
    ``exec_blas``), the threads it reports, and the kernel family it chose for this CPU at start-up
    (OpenBLAS's ``gotoblas`` pointer; ``$OPENBLAS_CORETYPE`` overrides the choice, read when
    OneFlow is imported). Linux wheels of OneFlow only; ``{"library": None}`` elsewhere.
    """
    import ctypes
    import glob
    from importlib.util import find_spec

    if find_spec("oneflow") is None and "oneflow" not in sys.modules:
        return {"library": None, "why": "OneFlow is not installed"}
    # OpenBLAS chooses its kernels when the library starts. The module's file, not its
    # import spec: oneflow.mock_torch rewrites oneflow.__spec__ (as "torch", without a file).
    flow = import_oneflow()
    libs = glob.glob(
        os.path.join(os.path.dirname(flow.__file__), "..", "oneflow.libs", "liboneflow*")
    )
    if not libs:
        return {"library": None, "why": "no bundled liboneflow (not a Linux wheel)"}
    lib = ctypes.CDLL(libs[0])
    if not hasattr(lib, "cblas_sgemm"):
        return {"library": None, "why": "liboneflow exports no cblas_sgemm"}
    get_threads = lib.openblas_get_num_threads
    get_threads.restype = ctypes.c_int
    chosen = ctypes.c_void_p.in_dll(lib, "gotoblas").value

    def is_chosen(core: str) -> bool:
        try:
            return ctypes.addressof(ctypes.c_char.in_dll(lib, f"gotoblas_{core}")) == chosen
        except ValueError:  # this build has no kernels for that family
            return False

    kernels = next((core for core in _BLAS_CORES if is_chosen(core)), "?")
    return {
        "library": "OpenBLAS (bundled in liboneflow)",
        "file": os.path.basename(libs[0]),  # not the path: it names this machine's folders
        "threaded": hasattr(lib, "exec_blas"),
        "threads": int(get_threads()),
        "kernels": kernels,
        "avx2_kernels": kernels in AVX2_BLAS_CORES,
        "coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
    }


def thread_cpu_seconds(
    fn: Callable[[], Any], *, repeats: int, framework: str = "none"
) -> dict[str, Any]:
    """CPU seconds each thread of this process spent while ``fn()`` (of ``framework``, waited
    for after each call) ran ``repeats`` times.

    Returns the wall seconds and the per-thread CPU seconds (``psutil``), largest first, threads
    under 1 ms left out: it tells the threads that computed from the ones that only waited. A
    thread near the wall time was busy, *working or spinning* (polling with ``sched_yield``
    counts); ``busy_threads`` counts those above half the wall time.
    """
    import psutil

    proc = psutil.Process()

    def snapshot() -> dict[int, float]:
        return {t.id: t.user_time + t.system_time for t in proc.threads()}

    synchronize(framework)
    before, t0 = snapshot(), time.perf_counter()
    for _ in range(repeats):
        fn()
        synchronize(framework)
    wall, after = time.perf_counter() - t0, snapshot()
    used = sorted((t - before.get(tid, 0.0) for tid, t in after.items()), reverse=True)
    used = [u for u in used if u >= 1e-3]
    return {
        "wall_s": wall,
        "thread_cpu_s": used,
        "busy_threads": sum(u > 0.5 * wall for u in used),
        "cores_used": sum(used) / wall if wall > 0 else None,
    }


def _time_pair(
    torch_call: Callable[[], Any],
    flow_call: Callable[[], Any],
    warmup: int,
    repeats: int,
    threads: int,
    items: int = 1,
) -> dict[str, Any]:
    """Both calls timed interleaved on the CPU (each Measurement's ``as_dict()`` with its
    ``times_s``), and ``per_thread``: :func:`thread_cpu_seconds` of each."""
    calls = {"PyTorch": torch_call, "OneFlow": flow_call}
    fws = {"PyTorch": "torch", "OneFlow": "oneflow"}
    kw = {"warmup": warmup, "repeats": repeats, "items": items, "threads": threads, "device": "cpu"}
    res = benchmark_interleaved(calls, framework=fws, **kw)
    per_thread = {
        k: thread_cpu_seconds(fn, repeats=max(2, repeats // 2), framework=fws[k])
        for k, fn in calls.items()
    }
    return {
        "per_thread": per_thread,
        **{k: {**m.as_dict(), "times_s": m.times_s} for k, m in res.items()},
    }


def matmul_pair(
    *, n: int = 2048, warmup: int = 3, repeats: int = 10, threads: int | None = None
) -> dict[str, Any]:
    """An ``n`` x ``n`` float32 matrix product in PyTorch and in OneFlow on the CPU, timed interleaved.

    Both get the same threads (default every core) and warm-up. Returns JSON-ready results (a
    fresh process can run it): per framework the Measurement's ``as_dict()`` with its ``times_s``
    and GFLOP/s at the median, and :func:`oneflow_blas`.
    """
    import torch

    given = same_threads(threads)  # before OneFlow starts: it reads its thread setting then
    flow = import_oneflow()
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    fa, fb = flow.tensor(a.numpy()), flow.tensor(b.numpy())
    with torch.inference_mode():
        out = _time_pair(lambda: a @ b, lambda: flow.matmul(fa, fb), warmup, repeats, given)
    for label in ("PyTorch", "OneFlow"):
        out[label]["gflops"] = 2.0 * n**3 / out[label]["median_s"] / 1e9
    return {"n": n, "threads": given, "oneflow_blas": oneflow_blas(), **out}


def cpu_probe(
    *,
    n: int = 2048,
    arch: str = "resnet18",
    image_size: int = 64,
    batch: int = 8,
    warmup: int = 3,
    repeats: int = 10,
    threads: int | None = None,
) -> dict[str, Any]:
    """:func:`matmul_pair`, then one ResNet (same weights) in both frameworks, for one fresh process.

    The ResNet's BatchNorm statistics are set from its input first (a random network otherwise
    normalises with mean 0 and variance 1). Run with ``env={"OPENBLAS_CORETYPE": "Haswell"}``, it
    measures both with the kernels that variable makes OneFlow's OpenBLAS choose at start-up: if
    the ResNet speeds up with the product, OneFlow's convolutions run in that OpenBLAS too.
    """
    import torch

    from helpers.workload.models import build_classifier, calibrate_batchnorm, twin

    matmul = matmul_pair(n=n, warmup=warmup, repeats=repeats, threads=threads)
    flow, given = import_oneflow(), matmul["threads"]  # both frameworks' threads set there
    x = torch.randn(batch, 3, image_size, image_size, generator=torch.Generator().manual_seed(0))
    tm = calibrate_batchnorm(build_classifier("torch", arch, num_classes=8), x)
    fm = twin(tm, "oneflow", build_classifier, arch, num_classes=8).eval()
    fx = flow.tensor(x.numpy())
    with torch.inference_mode(), flow.no_grad():
        resnet = _time_pair(lambda: tm(x), lambda: fm(fx), warmup, repeats, given, items=batch)
    resnet.update(arch=arch, image_size=image_size, batch=batch, threads=given)
    return {"matmul": matmul, "resnet": resnet}


def gap_table(
    here: Mapping[str, RatioSummary], fixed: Mapping[str, RatioSummary] | None, title: str
) -> Table:
    """OneFlow's time over PyTorch's per work, as installed (``here``) and, when a second process
    ran with AVX2 kernels, beside it (``fixed``) with what those kernels gain: a ratio of the two
    processes' ratios, said only when their interquartile ranges are apart."""
    rows = []
    for work, g in here.items():
        row = {"work": work, "OneFlow / PyTorch, as installed": str(g)}
        if fixed is not None:
            f = fixed[work]
            row["with OPENBLAS_CORETYPE=Haswell"] = str(f)
            # two processes: conclusive when the IQRs are apart
            gain = f"{g.median / f.median:.1f}x faster" if f.p75 < g.p25 else "inconclusive"
            row["OneFlow with AVX2 kernels"] = gain
        rows.append(row)
    return Table(rows, title=title)
