"""TorchInductor's caches: compile from an empty one, and time a fresh start (chapter 6).

``torch.compile`` keeps kernels, their libraries and whole compiled graphs in
``TORCHINDUCTOR_CACHE_DIR`` (default ``<tmp>/torchinductor_<user>``), keyed by graph, settings
and versions: a compile timed where the model was compiled before is a cache's time.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from helpers.core import precision
from helpers.workload import models

__all__ = ["CACHE_ENV", "empty_cache", "check_cpu", "cache_counters", "fresh_start"]

# The environment variable that names Inductor's on-disk cache folder (read at each use).
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@contextlib.contextmanager
def empty_cache(folder: str | Path) -> Iterator[Path]:
    """Inductor's cache in ``folder`` (empty or absent) inside the block.

    Its in-memory caches are cleared on entry and exit (else this process's kernels are reused).
    A path with whitespace is refused: torch 2.10 passes it to g++ unquoted, which then fails.
    """
    from torch._inductor.utils import clear_caches

    folder = Path(folder)
    if any(ch.isspace() for ch in str(folder)):
        raise ValueError(f"{folder!s}: Inductor's compiler commands break on whitespace")
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty: a compile there would not start cold")
    folder.mkdir(parents=True, exist_ok=True)
    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    clear_caches()
    try:
        yield folder
    finally:
        clear_caches()
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def check_cpu() -> float:
    """Run Inductor's once-per-process check of the CPU's vector instruction sets; its seconds.

    It builds a test library per instruction set (cached on disk) and loads each in a fresh
    interpreter that imports torch (not cached: ``torch/_inductor/cpu_vec_isa.py``). Timed apart,
    it stays out of the compile times that follow; a second call returns at once.
    """
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    start = time.perf_counter()
    valid_vec_isa_list()  # functools.cache: once per process
    return time.perf_counter() - start


def cache_counters() -> dict[str, int]:
    """This process's Inductor and AOTAutograd cache hits and misses so far
    (``fxgraph_cache_hit``: a compiled graph loaded from the cache; ``_miss``: compiled)."""
    from torch._dynamo.utils import counters

    return {
        name: int(n)
        for group in ("inductor", "aot_autograd")
        for name, n in counters[group].items()
        if "cache" in name
    }


def fresh_start(
    *,
    arch: str,
    num_classes: int,
    weights_path: str,
    input_path: str,
    out_path: str,
    threads: int,
    settings: dict[str, Any] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """One start of a service serving ``arch`` compiled (a fresh process's target): builds it
    with the ``.npz`` weights, compiles it, times the first call on the ``.npy`` batch (saving its
    output). ``settings`` (``torch._inductor.config``) and TF32 (off, as the chapter's setup)
    are part of Inductor's cache key, down to ones that only change what it prints. Returns ``isa_probe_s`` (:func:`check_cpu`;
    0 on a GPU), ``first_call_s``, the cache folder and :func:`cache_counters`.
    """
    import torch
    import torch._inductor.config as inductor_config

    torch.set_num_threads(threads)
    precision.set_tf32(False)
    inductor_config.load_config(dict(settings or {}))
    model = models.build_classifier("torch", arch, num_classes=num_classes)
    with np.load(weights_path) as npz:
        models.load_numpy_state(model, dict(npz))
    model = model.eval().to(device)
    x = torch.from_numpy(np.load(input_path)).to(device)
    probe_s = check_cpu() if torch.device(device).type == "cpu" else 0.0
    start = time.perf_counter()
    compiled = torch.compile(model)
    with torch.inference_mode():
        out = compiled(x)
        np.save(out_path, out.float().cpu().numpy())
    return {
        "isa_probe_s": probe_s,
        "first_call_s": time.perf_counter() - start,
        "cache_dir": os.environ.get(CACHE_ENV),
        "counters": cache_counters(),
    }
