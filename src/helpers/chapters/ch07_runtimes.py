"""Chapter 7's companion: the embedder it deploys, the wait-policy control, the 224 px comparison.

:func:`embedder_timings` runs in a fresh process per policy: GNU OpenMP reads ``OMP_WAIT_POLICY``
once, when PyTorch starts.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision

from helpers.core import comparison, precision
from helpers.core.threads import WAIT_POLICY_ENV
from helpers.deploy import export, runtimes
from helpers.measure.measurement import Measurement, RatioSummary, paired_ratio
from helpers.measure.timer import benchmark, benchmark_interleaved
from helpers.show.table import Table
from helpers.workload import data, models

__all__ = [
    "EMBEDDER_ENV",
    "network_of",
    "embedder_timings",
    "wait_ratios",
    "policy_table",
    "cpu_rivals",
    "compare_at_224",
    "L2Normalize",
    "build_embedder",
]

# The environment variable that picks the embedder's backbone (chapter 7's "your own model").
EMBEDDER_ENV = "COURSE_EMBEDDER"


def network_of(model: torch.nn.Module, arch: str, x: torch.Tensor) -> str:
    """``arch``, the precision policy's name for the embedder; your own backbone's accumulation is
    measured first on ``x`` (:func:`helpers.core.precision.measure_accumulation`)."""
    if arch not in precision.NETWORK_ACCUMULATION and arch not in precision.MEASURED_ACCUMULATION:
        print(precision.measure_accumulation(model.eval(), x, name=arch))
    return arch


def embedder_timings(
    *,
    arch: str,
    dim: int,
    width: float,
    work_dir: str,
    threads: int,
    batches: Sequence[int],
    warmup: int,
    repeats: int,
    spinning: bool,
) -> dict[str, Any]:
    """Time the embedder in PyTorch eager and in ONNX Runtime, in this process (a subprocess target).

    ``work_dir`` holds chapter 7's ``weights.npz``, ``inputs.npy`` and ``embedder_simplified.onnx``.
    PyTorch's OpenMP threads wait as this process's ``OMP_WAIT_POLICY`` says (set before it
    starts); the session spins as ``spinning`` says. Both are read back into the result.
    """
    work = Path(work_dir)
    torch.set_num_threads(threads)
    model = build_embedder(arch, dim, width)
    with np.load(work / "weights.npz") as npz:
        models.load_numpy_state(model, dict(npz))
    x, timing = np.load(work / "inputs.npy"), {"warmup": warmup, "repeats": repeats}
    kw = {"intra_op_threads": threads, "spinning": spinning, "verbose": False}
    session = runtimes.create_session(work / "embedder_simplified.onnx", "cpu", **kw)
    with torch.inference_mode():
        runs = {
            f"PyTorch eager, batch {b}": benchmark(
                partial(model.eval(), torch.from_numpy(x[:b])), items=b, **timing
            )
            for b in batches
        }
    runs |= {f"ONNX Runtime, batch {b}": session.benchmark(x[:b], **timing) for b in batches}
    options = session.handle.get_session_options()
    return {
        "policy": os.environ.get(WAIT_POLICY_ENV, "").strip().upper() or "unset",
        "torch_threads": torch.get_num_threads(),
        "ort_spinning": options.get_session_config_entry("session.intra_op.allow_spinning"),
        "rows": {
            k: {"median_s": m.median, "cores": m.cores_used, "contended": m.contended}
            for k, m in runs.items()
        },
    }


def wait_ratios(
    runs: Mapping[str, Sequence[dict[str, Any]]], *, base: str, other: str
) -> dict[str, RatioSummary]:
    """Per timed call, ``other``'s paired speedup over ``base``: ``runs[policy]`` holds one
    :func:`embedder_timings` result per round, round *i* of both policies run back to back."""
    if len(runs[base]) != len(runs[other]) or not runs[base]:
        raise ValueError("need the same number (at least one) of rounds for both policies")

    def timed(name: str, p: str) -> Measurement:
        return Measurement(f"{name} ({p})", [r["rows"][name]["median_s"] for r in runs[p]])

    return {
        name: paired_ratio(timed(name, base), timed(name, other)) for name in runs[base][0]["rows"]
    }


def policy_table(runs: Mapping[str, Sequence[dict[str, Any]]], *, base: str, other: str) -> Table:
    """One row per timed call: median ms under ``base`` and ``other``, and other's paired speedup
    (:func:`wait_ratios`) with a verdict that says "inconclusive" when its IQR holds 1."""
    rows = []
    for name, ratio in wait_ratios(runs, base=base, other=other).items():
        ms = {
            p: 1e3 * np.median([r["rows"][name]["median_s"] for r in runs[p]])
            for p in (base, other)
        }
        busy = any(r["rows"][name]["contended"] for p in (base, other) for r in runs[p])
        rows.append(
            {
                "call": name,
                f"{base} ms": ms[base],
                f"{other} ms": ms[other],
                f"{other} vs {base}": ratio.verdict(),
                "machine": "CONTENDED" if busy else "quiet",
            }
        )
    return Table(rows, formats={f"{base} ms": ".2f", f"{other} ms": ".2f"})


def cpu_rivals(path: str | Path, threads: int, precisions: Sequence[str]) -> dict[str, Any]:
    """The CPU runtimes of chapter 7's FPS table on ``threads`` threads: ONNX Runtime (level
    'all') and one OpenVINO model per precision (``"f32"``, ``"bf16"``: what this CPU runs)."""
    ort = runtimes.create_session(path, "cpu", intra_op_threads=threads, verbose=False)
    ov = {
        f"OpenVINO {p}": runtimes.openvino_model(path, precision=p, threads=threads, verbose=False)
        for p in precisions
    }
    return {"ORT CPU fp32": ort, **ov}


def compare_at_224(
    *,
    arch: str,
    dim: int,
    batch: int,
    threads: int,
    warmup: int,
    repeats: int,
    work_dir: str | Path,
    freeze: bool = False,
) -> dict[str, Any]:
    """The embedder at 224 px, full width: PyTorch's CPU paths against ONNX Runtime and OpenVINO.

    Every contender is checked against PyTorch eager in strict float32 (cosine 0.99999), then
    timed interleaved at batch 1 and ``batch``; ``freeze`` adds Inductor with freezing (minutes of
    compiling; ``compile_s`` is None without it). ``runs``: batch -> label -> Measurement.
    """
    import time

    from torch.fx.experimental.optimization import fuse

    torch.set_num_threads(threads)
    x = torch.from_numpy(data.normalize(data.make_images(max(batch, 2), 224, seed=4)[0]))
    model = models.calibrate_batchnorm(build_embedder(arch, dim, 1.0), x).eval()
    net = network_of(model, arch, x)
    path = Path(work_dir) / f"{arch}_224.onnx"
    export.export_and_verify(model, x[:2], path, network=net)
    nhwc = copy.deepcopy(model).to(memory_format=torch.channels_last)
    try:  # fuse copies the model; torch.fx cannot trace every model's forward
        folded = fuse(model).to(memory_format=torch.channels_last)
    except Exception:  # noqa: BLE001 - that row is then left out
        folded = None

    rivals = {  # NCHWc is level 'all''s blocked layout; 'extended' has the same fusions
        k: runtimes.create_session(
            path, "cpu", optimization=o, intra_op_threads=threads, verbose=False
        )
        for k, o in (("ONNX Runtime", "all"), ("ONNX Runtime, no NCHWc", "extended"))
    }
    rivals["OpenVINO f32"] = runtimes.openvino_model(
        path, precision="f32", threads=threads, verbose=False
    )

    def cl(xb: torch.Tensor) -> torch.Tensor:
        return xb.contiguous(memory_format=torch.channels_last)

    calls: dict[str, Any] = {
        "PyTorch eager": model,
        "PyTorch channels-last": lambda xb: nhwc(cl(xb)),
    }
    if folded is not None:
        calls["PyTorch BN folded + channels-last"] = lambda xb: folded(cl(xb))
    compile_s = None
    if freeze:
        frozen = torch.compile(model, options={"freezing": True}, dynamic=False)
        start = time.perf_counter()
        with torch.inference_mode():
            for b in sorted({1, batch}):  # one compile per batch size (dynamic=False)
                frozen(x[:b])
        compile_s = time.perf_counter() - start
        calls["PyTorch compiled (freezing)"] = frozen
    calls |= {k: lambda xb, r=r: r.run(xb.numpy()) for k, r in rivals.items()}
    frameworks = {k: "torch" if k.startswith("PyTorch") else "none" for k in calls}
    bound = {"mode": "fp32", "network": net, "min_cosine": 0.99999}
    timing = {"framework": frameworks, "warmup": warmup, "repeats": repeats, "threads": threads}
    with torch.inference_mode():
        want = model(x[:batch])
        checks = {
            k: comparison.assert_outputs_close(c(x[:batch]), want, **bound, name=f"{k} at 224 px")
            for k, c in calls.items()
        }
        runs = {
            b: benchmark_interleaved(
                {k: partial(c, x[:b].contiguous()) for k, c in calls.items()},
                items=b,
                device="cpu",
                **timing,
            )
            for b in sorted({1, batch})
        }
    return {"runs": runs, "checks": checks, "compile_s": compile_s, "onnx_path": str(path)}


# ---- saved from notebooks/07_onnx_runtimes.ipynb by tools/save_cells.py: edit it there ----
class L2Normalize(torch.nn.Module):  # each row divided by its length: the last step
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(x, dim=1)


def build_embedder(arch: str, dim: int, width: float = 1.0) -> torch.nn.Module:
    """Image -> L2-normalised ``dim`` numbers: case study 2's MobileNetV2 (``width``:
    its width multiplier), or a torchvision classifier with its last layer resized."""
    if arch == "mobilenet_v2":
        return models.build_embedder("torch", dim, width)
    if not callable(getattr(torchvision.models, arch, None)):
        raise ValueError(f"torchvision.models has no model {arch!r}")
    net = getattr(torchvision.models, arch)(weights=None, num_classes=dim)  # offline
    return torch.nn.Sequential(net, L2Normalize())


# ---- end of cells saved from notebooks/07_onnx_runtimes.ipynb ----
