"""TorchInductor's caches: compile from an empty one, and time a fresh start (chapter 6).

``torch.compile`` keeps what it compiled in a folder, ``TORCHINDUCTOR_CACHE_DIR`` (by default
``<tmp>/torchinductor_<user>``): the generated kernels, the libraries built from them and whole
compiled graphs (the FX graph cache), keyed by the graph, the settings and the versions. A compile
time measured on a machine that compiled the same model before is therefore a cache's time, not a
first start's. Chapter 6 shows both:

- :func:`empty_cache` -- inside the block Inductor writes to (and reads from) an empty folder, and
  its in-memory caches start empty, so a compile inside is what a first start pays;
- :func:`check_cpu` -- Inductor's once-per-process check of the CPU's vector instruction sets,
  run and timed on its own (a cache saves only part of it: it loads a test library for each
  instruction set in a fresh Python interpreter; torch 2.10's ``torch/_inductor/cpu_vec_isa.py``);
- :func:`cache_counters` -- the process's cache hits and misses so far;
- :func:`fresh_start` -- the target of a fresh process (:func:`helpers.core.subprocess_run.run_in_subprocess`)
  that builds a classifier from saved weights, compiles it and times its first call, and reports
  Inductor's cache counters (hits and misses of the compiled graph): started on the cache folder
  another start filled, it shows what the cache saves.

PyTorch is imported inside the functions: importing this module imports no framework.
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
    """Inductor's cache in ``folder`` (which must be empty or absent) inside the block.

    Inductor's in-memory caches are cleared on entry and on exit (a kernel built earlier in this
    process would otherwise be reused); ``TORCHINDUCTOR_CACHE_DIR`` is restored on exit. What was
    compiled inside keeps working afterwards. A path with whitespace is refused: torch 2.10's
    Inductor passes it to the C++ compiler unquoted, and g++ then fails.
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
    """Run Inductor's check of this CPU's vector instruction sets now; return its seconds.

    Inductor does it once per process, before its first CPU compile (and before loading a
    compiled ``.pt2``): it builds a small test library per instruction set (cached on disk) and
    loads each in a fresh Python interpreter that imports torch (not cached). Timed apart, it
    stays out of the compile times that follow; a second call returns at once.
    """
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    start = time.perf_counter()
    valid_vec_isa_list()  # functools.cache: once per process
    return time.perf_counter() - start


def cache_counters() -> dict[str, int]:
    """This process's counts of Inductor's and AOTAutograd's cache hits and misses so far.

    ``fxgraph_cache_hit``: a compiled graph was loaded from the cache; ``fxgraph_cache_miss``:
    it was compiled (and saved); likewise ``autograd_cache_*`` one level up.
    """
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
    tf32: bool = False,
    device: str = "cpu",
    mode: str = "default",
) -> dict[str, Any]:
    """One start of a service that serves ``arch`` compiled (a fresh process's target).

    Builds the classifier, loads the weights saved in ``weights_path`` (``.npz``), compiles it
    with ``torch.compile(mode=...)`` and times the first call on the batch in ``input_path``
    (``.npy``), which compiles; saves that output to ``out_path``. Inductor's cache is the folder
    ``TORCHINDUCTOR_CACHE_DIR`` names (the caller sets it). PyTorch computes with ``threads``
    threads and Inductor takes ``settings`` (``torch._inductor.config`` names and values): its
    settings are part of its cache key, so a start that should find another's compiled graph
    must use that start's settings, down to ones that only change what it prints, and its
    precision flags (``tf32``: :func:`helpers.core.precision.set_tf32`, also a part). On a CPU,
    Inductor's check of the vector instruction sets runs first, timed on its own
    (``isa_probe_s``; 0 on a GPU). Returns the check's and the first call's seconds, the cache
    folder and :func:`cache_counters`.
    """
    import torch
    import torch._inductor.config as inductor_config

    torch.set_num_threads(threads)
    precision.set_tf32(tf32)
    inductor_config.load_config(dict(settings or {}))
    model = models.build_classifier("torch", arch, num_classes=num_classes)
    with np.load(weights_path) as npz:
        models.load_numpy_state(model, dict(npz))
    model = model.eval().to(device)
    x = torch.from_numpy(np.load(input_path)).to(device)
    probe_s = check_cpu() if torch.device(device).type == "cpu" else 0.0
    start = time.perf_counter()
    compiled = torch.compile(model, mode=None if mode == "default" else mode)
    with torch.inference_mode():
        out = compiled(x)
        np.save(out_path, out.float().cpu().numpy())
    return {
        "isa_probe_s": probe_s,
        "first_call_s": time.perf_counter() - start,
        "cache_dir": os.environ.get(CACHE_ENV),
        "counters": cache_counters(),
    }
