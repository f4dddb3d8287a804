"""A GPU estimate per chapter: its full-size passes against published peaks, until a GPU run.

No GPU has run the course's full mode yet. Until one does, each chapter's time on an A100, an
L4 and an H100 is estimated here, and labelled an estimate wherever it is shown:

    estimate = host part + device part

- **device part**: the full-size PyTorch passes the chapter runs on the GPU in full mode (with
  full mode's repeats, not ``make fullcpu``'s tenth), counted by reading each chapter
  (:data:`WORK`: which cells, what pass, how many). Each pass is measured once on PyTorch's
  ``meta`` device (no data, no compute): its floating-point operations
  (``torch.utils.flop_counter.FlopCounterMode``), the bytes its ATen operators read and write
  (every operator's tensor inputs plus outputs, unfused: an upper bound on memory traffic) and
  its operator count. One pass takes

      max(FLOPs / (COMPUTE_EFF x peak), bytes / (MEMORY_EFF x bandwidth)) + ops x LAUNCH_S

  with the peak of the math mode it runs in: TF32 tensor cores for the float32 model (PyTorch's
  default for convolutions on Ampere and newer), BF16 for the chapters' low-precision rows.
  ``COMPUTE_EFF``, ``MEMORY_EFF`` and ``LAUNCH_S`` (a fixed cost per operator: PyTorch's eager
  dispatch and the kernel launch) are assumptions, stated beside every estimate.
- **host part**: everything else the chapter does, which a GPU does not speed up (kernel start,
  imports, data, OneFlow on a CPU at quick sizes, exports, ONNX Runtime and OpenVINO on the CPU,
  plots): the chapter's measured wall time in the full-size CPU run (``make fullcpu``) minus the
  cells :data:`WORK` moves to the GPU. That run made a tenth of the repeats and swept batches
  1, 16 and 64 only; where the host part repeats work (chapters 7 and 8 time CPU runtimes at
  full size) a full-mode run takes longer: the host part is a lower bound there, and a 2-core
  host is slower than a rental's.

Peaks (:data:`GPUS`) are dense, from NVIDIA's datasheets, which print tensor-core figures with
sparsity ("1/2 lower without"): A100 (SXM 80 GB: FP64 9.7, FP32 19.5, TF32 312 and BF16 624
sparse, 2,039 GB/s), L4 (FP32 30.3, TF32 120 and BF16 242 sparse, 300 GB/s), H100 (SXM: FP32 67,
TF32 989 and BF16 1,979 sparse, 3.35 TB/s). FP64 (chapter 2's float64 reference) is the
non-tensor-core rate (L4: 1/64 of FP32).

    python tools/gpu_estimate.py [--write-setup]   # make fullcpu: also book/setup.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]
import chapter_times as ct  # noqa: E402 - the reference CPU and how machines are numbered
from full_cpu_run import _minutes  # noqa: E402

from helpers.core.hardware import describe_machine, same_machine  # noqa: E402

GPUS = {  # TFLOP/s dense and TB/s, from the datasheets named above
    "A100": {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "tb_s": 2.039},
    "L4": {"fp64": 0.49, "fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "tb_s": 0.300},
    "H100": {"fp64": 34.0, "fp32": 67.0, "tf32": 495.0, "bf16": 989.0, "tb_s": 3.35},
}
COMPUTE_EFF = 0.5  # assumed: a ResNet's convolutions reach half the tensor-core peak
MEMORY_EFF = 0.7  # assumed: 70% of the datasheet bandwidth
LAUNCH_S = 5e-6  # assumed: 5 us of eager dispatch + launch per ATen operator

# A pass: (model, kind, batch, image size). Kinds: "fwd" inference forward; "input_grad" the
# pruned task (forward, backward to the input only); "task" the original task (forward,
# backward with weight gradients, SGD step at lr 0, second forward); "train" a training step
# (forward, backward, optimizer step). Models: "resnet101", "resnet18", "mobilenetv2".
Pass = tuple[str, str, int, int]


def _cost(p: Pass) -> dict[str, float]:
    """FLOPs, bytes and operator count of one pass, measured on the meta device."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    from helpers.workload import models

    arch, kind, batch, size = p

    class Traffic(TorchDispatchMode):
        """Bytes read and written, operators, and the peak bytes of live tensors: every
        storage is counted from the operator that creates it until Python frees it (a
        finalizer), the weights, the input and what autograd saves for the backward included."""

        def __init__(self) -> None:
            super().__init__()
            self.bytes = self.ops = 0
            self.live: dict[int, int] = {}
            self.now = self.peak = 0

        def hold(self, t: torch.Tensor) -> None:
            storage = t.untyped_storage()
            key = id(storage)
            if key in self.live:
                return
            self.live[key] = n = storage.nbytes()
            self.now += n
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._free, key)

        def _free(self, key: int) -> None:
            self.now -= self.live.pop(key, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            flat = torch.utils._pytree.tree_leaves((args, kwargs, out))
            self.bytes += sum(t.nbytes for t in flat if isinstance(t, torch.Tensor))
            self.ops += 1
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.hold(t)
            return out

    with torch.device("meta"):
        if arch == "mobilenetv2":
            net = models.build_embedder("torch", 512, 1.0)
        else:
            net = models.build_classifier("torch", arch, num_classes=8)
    x = torch.empty(batch, 3, size, size, device="meta")
    flops, traffic = FlopCounterMode(display=False), Traffic()
    for t in [*net.parameters(), *net.buffers(), x]:
        traffic.hold(t)
    opt = torch.optim.SGD(net.parameters(), lr=0.0) if kind in ("task", "train") else None
    with flops, traffic:
        if kind == "fwd":
            with torch.inference_mode():
                net.eval()(x)
        elif kind == "input_grad":
            net.eval().requires_grad_(False)
            xi = x.clone().requires_grad_(True)
            net(xi).max(1).values.sum().backward()
        else:
            net.train(kind == "train")
            xi = x.clone().requires_grad_(kind == "task")
            net(xi).max(1).values.sum().backward()
            opt.step()
            if kind == "task":
                with torch.no_grad():
                    net(x)
    # the pages train with AdamW (helpers.workload.training): two moments per weight, held for
    # the whole training, where this pass steps a stateless SGD
    adamw = 2 * sum(t.nbytes for t in net.parameters()) if kind == "train" else 0
    return {
        "flops": flops.get_total_flops(),
        "bytes": traffic.bytes,
        "ops": traffic.ops,
        "peak_bytes": traffic.peak + adamw,
    }


def pass_seconds(cost: dict[str, float], gpu: str, math: str = "tf32") -> float:
    """One pass on ``gpu``: the slower of compute and memory, plus a launch cost per operator."""
    g = GPUS[gpu]
    compute = cost["flops"] / (COMPUTE_EFF * g[math] * 1e12)
    memory = cost["bytes"] / (MEMORY_EFF * g["tb_s"] * 1e12)
    return max(compute, memory) + cost["ops"] * LAUNCH_S


# Fixed costs that are not passes (assumptions, stated with every estimate): building a
# torch.compile'd ResNet-101 on a GPU (inductor, default mode; max-autotune benchmarks kernel
# candidates), and a TensorRT engine build. Only for the GPU-only steps: a compile that runs on
# the CPU too is host work measured there (its cell stays in the host part).
FIXED_S = {"compile": 60.0, "compile_autotune": 300.0, "tensorrt": 120.0}

# What each chapter runs on the GPU in full mode, read from its cells: (cells, framework,
# pass, count). Cells are nbval's numbers (code cells from 0). Framework "torch": PyTorch on the
# GPU at full sizes; "torch~flow": PyTorch at the sizes of OneFlow's device (full where OneFlow
# has the GPU, A100 and L4; quick sizes on an H100, where OneFlow 0.9.0 runs on the CPU);
# "oneflow": OneFlow on the GPU on an A100 or L4, on the CPU at quick sizes on an H100 (there
# its cells' measured time stays in the host part). Passes are (model, kind, batch, image
# size) as in :data:`Pass`, or a key of FIXED_S, or ("matmul", n). The counts are full mode's:
# warm-up 20, timed calls 50, 300 training steps, the batch sweep 1-64. Approximate where a
# helper decides (thread-count candidates: 2; OneFlow subprocess configurations: read off the
# page); a few passes of a check are left out.
R101, MNV2 = "resnet101", "mobilenetv2"
WORK: dict[str, list[tuple[tuple[int, ...], str, Any, int]]] = {
    "00_measuring": [
        ((4, 6, 7), "torch", (R101, "fwd", 16, 224), 270),
        ((8,), "torch", (R101, "fwd", 16, 224), 220),
        ((14,), "torch", (R101, "fwd", 16, 224), 30),
        ((14,), "torch", ("matmul", 8192), 30),
        ((17,), "torch", (R101, "fwd", 1, 224), 2040),
        *[((19,), "torch", (R101, "fwd", b, 224), 70) for b in (1, 2, 4, 8, 16, 32, 64)],
        ((21, 24, 25), "torch", (R101, "fwd", 16, 224), 53),
        ((22, 23), "torch", ("matmul", 4096), 20),
        ((27, 30), "torch", (MNV2, "fwd", 1, 224), 250),
        ((32,), "torch", (R101, "fwd", 1, 224), 53),
        ((32,), "torch", (R101, "fwd", 64, 224), 53),
    ],
    "01_migration": [
        ((4,), "torch~flow", (R101, "train", 16, 224), 20),
        ((7, 9, 12, 13), "oneflow", (R101, "fwd", 16, 224), 8),
        ((16,), "oneflow", (R101, "train", 16, 224), 3),
        ((19,), "torch~flow", (R101, "fwd", 1, 224), 70),
        ((19,), "torch~flow", (R101, "fwd", 16, 224), 70),
        ((19,), "oneflow", (R101, "fwd", 1, 224), 70),
        ((19,), "oneflow", (R101, "fwd", 16, 224), 70),
    ],
    "02_precision_alignment": [
        ((5,), "torch~flow", (R101, "train", 32, 224), 300),
        ((5,), "torch~flow", (R101, "fwd", 32, 224), 32),
        ((6,), "oneflow", (R101, "fwd", 64, 224), 1),
        ((8, 9), "torch~flow", (R101, "fwd64", 16, 224), 8),
        ((8, 9), "oneflow", (R101, "fwd", 16, 224), 8),
        ((19,), "torch~flow", ("resnet18", "train", 16, 112), 300),
        ((19,), "oneflow", ("resnet18", "train", 16, 112), 300),
        ((20,), "torch~flow", ("resnet18", "train", 16, 112), 300),
        ((25, 26), "oneflow", ("resnet18", "train", 16, 112), 600),
        ((28, 29), "torch~flow", ("resnet18", "train", 16, 112), 70),
        ((28, 29), "oneflow", ("resnet18", "train", 16, 112), 70),
    ],
    "03_dynamic_to_static": [
        ((5, 9, 10, 11, 13, 15, 16), "oneflow", (R101, "train", 1, 224), 140),
        ((5, 9, 10, 11, 13, 15, 16), "oneflow", (R101, "task", 1, 224), 140),
        ((5, 9, 10, 11, 13, 15, 16), "oneflow", (R101, "fwd", 1, 224), 280),
        ((10, 13), "oneflow", (R101, "train", 16, 112), 32),
        ((20, 28), "oneflow", (R101, "fwd", 1, 224), 140),
        ((20, 28), "oneflow", (R101, "fwd", 16, 224), 140),
        ((18,), "torch", (R101, "fwd", 16, 224), 20),
        ((19,), "torch", (R101, "fwd", 1, 224), 350),
        ((19,), "torch", (R101, "fwd", 16, 224), 350),
        ((24,), "torch", "compile", 1),
        ((24,), "torch", (R101, "fwd", 1, 224), 140),
        ((25,), "torch", "compile", 1),
        ((25,), "torch", (R101, "fwd", 1, 224), 140),
        ((25,), "torch", (R101, "fwd", 16, 224), 140),
    ],
    "04_pruning": [
        ((10,), "torch", (R101, "task", 1, 224), 104),
        ((20, 21, 22, 23, 24, 25, 26, 27), "torch", (R101, "task", 1, 224), 20),
        ((28,), "torch", (R101, "task", 1, 224), 210),
        ((28,), "torch", (R101, "input_grad", 1, 224), 70),
        ((28,), "oneflow", (R101, "task", 1, 224), 420),
        ((28,), "oneflow", (R101, "input_grad", 1, 224), 140),
        ((34,), "torch", (R101, "task", 16, 224), 52),
        ((34,), "torch", (R101, "input_grad", 16, 224), 52),
    ],
    "05_parallelism": [
        ((9,), "torch", (R101, "fwd", 1, 224), 256),
        ((9,), "torch", (R101, "fwd", 16, 224), 24),
        ((9,), "torch", (R101, "input_grad", 1, 224), 128),
        ((9,), "torch", (R101, "input_grad", 16, 224), 12),
        *[((15,), "torch", (R101, "input_grad", b, 224), 140) for b in (1, 2, 4, 8, 16, 32, 64)],
        ((15,), "torch", (R101, "fwd", 1, 224), 140),
        ((15,), "torch", (R101, "fwd", 16, 224), 140),
        *[
            ((19,), "torch", (R101, "input_grad", b, 224), max(20, 400 // b))
            for b in (1, 2, 4, 8, 16, 32, 64)
        ],
        ((20, 21, 22), "oneflow", (R101, "fwd", 1, 224), 70),
        ((20, 21, 22), "oneflow", (R101, "fwd", 16, 224), 70),
        ((24,), "torch", (R101, "input_grad", 16, 224), 50),
        ((25, 26, 27, 28, 29, 30, 31), "torch", (R101, "input_grad", 16, 224), 350),
    ],
    "06_compile_optimisations": [
        ((4,), "torch", (R101, "train", 32, 224), 300),
        ((4,), "torch", (R101, "fwd", 32, 224), 32),
        ((5, 7, 10), "torch", (R101, "fwd", 16, 224), 111),
        ((12, 13), "oneflow", (R101, "fwd", 16, 224), 720),
        ((35,), "torch", (R101, "fwd", 16, 224), 630),
        ((36,), "torch", "compile", 1),  # reduce-overhead (default: measured here)
        ((36,), "torch", "compile_autotune", 1),
        ((37,), "torch", (R101, "fwd", 16, 224), 280),
        ((39, 40), "torch", "tensorrt", 1),
        ((39, 40), "torch", (R101, "fwd_bf16", 16, 224), 100),
        ((44,), "torch", (R101, "fwd", 16, 224), 212),
        ((45,), "torch", (R101, "fwd", 16, 224), 106),
    ],
    "07_onnx_runtimes": [
        ((7,), "torch", (MNV2, "fwd", 1, 224), 220),
        ((20,), "torch", (MNV2, "fwd", 1, 224), 220),
        ((20,), "torch", (MNV2, "fwd", 16, 224), 120),
        ((21,), "torch", "tensorrt", 1),
        ((21,), "torch", (MNV2, "fwd_bf16", 16, 224), 120),
        ((22,), "torch", (MNV2, "fwd_bf16", 1, 224), 220),
        ((30,), "torch", (MNV2, "fwd", 1, 224), 120),
        ((30,), "torch", (MNV2, "fwd", 16, 224), 120),
        ((35, 36, 38), "torch", (MNV2, "fwd", 1, 224), 400),
    ],
    "08_int8_quantization": [
        ((2,), "torch", (R101, "train", 64, 224), 1200),
        ((2,), "torch", (R101, "fwd", 64, 224), 32),
        ((16,), "torch", "tensorrt", 1),
        ((16, 17), "torch", (R101, "fwd_bf16", 16, 224), 280),
    ],
    "10_capstone": [
        ((3,), "torch", (R101, "input_grad", 16, 224), 8),
        ((20, 21, 22, 23), "torch", (R101, "task", 1, 224), 432),
        ((20, 21, 22, 23), "torch", (R101, "input_grad", 1, 224), 216),
        ((20, 21, 22, 23), "torch", (R101, "input_grad", 16, 224), 972),
        ((20, 21, 22, 23), "torch", (R101, "fwd", 16, 224), 216),
        ((33, 34, 35), "torch", (R101, "input_grad", 16, 224), 120),
    ],
}
QUICK = ("resnet18", 8, 64)  # quick mode's network, batch and image size (H100 "torch~flow")


def _quick(p: Pass) -> Pass:
    arch, kind, batch, size = p
    return (QUICK[0], kind, min(batch, QUICK[1]), max(32, size * QUICK[2] // 224))


_costs: dict[Any, dict[str, float]] = {}


def cost(p: Any) -> dict[str, float]:
    """FLOPs, bytes, operators and math mode of one pass (cached)."""
    if p not in _costs:
        if isinstance(p, tuple) and p[0] == "matmul":
            n = p[1]
            _costs[p] = {
                "flops": 2 * n**3,
                "bytes": 12 * n * n,
                "ops": 1,
                "math": "fp32",
                "peak_bytes": 12 * n * n,  # A, B and the product, float32
            }
        else:
            arch, kind, batch, size = p
            base = kind.replace("_bf16", "").replace("fwd64", "fwd")
            c = _cost((arch, base, batch, size))
            math = "bf16" if kind.endswith("_bf16") else "fp64" if kind == "fwd64" else "tf32"
            scale = {"bf16": 0.5, "fp64": 2.0}.get(math, 1.0)  # measured in float32
            _costs[p] = {
                **c,
                "bytes": c["bytes"] * scale,
                "peak_bytes": c["peak_bytes"] * scale,
                "math": math,
            }
    return _costs[p]


def device_seconds(p: Any, gpu: str) -> float:
    if isinstance(p, str):
        return FIXED_S[p]
    c = cost(p)
    return pass_seconds(c, gpu, c["math"])


def estimate(stem: str, row: dict[str, Any], gpu: str) -> dict[str, float]:
    """Host part, device part and their sum for one chapter on ``gpu`` (seconds)."""
    cell_s = {c["cell"]: c["seconds"] for c in row.get("cells_timed", [])}
    moved: set[int] = set()
    stay: set[int] = set()
    device = 0.0
    for cells, fw, p, n in WORK.get(stem, []):
        if fw == "oneflow" and gpu == "H100":
            stay.update(cells)  # OneFlow on the CPU at quick sizes, as measured here
            continue
        if fw == "torch~flow" and gpu == "H100" and not isinstance(p, str):
            p = _quick(p) if p[0] != "matmul" else p
        moved.update(cells)
        device += n * device_seconds(p, gpu)
    fixed_cells = {c for cells, _, p, _ in WORK.get(stem, []) if isinstance(p, str) for c in cells}
    off = sum(cell_s.get(c, 0.0) for c in moved - stay - fixed_cells)
    host = max(0.0, row["wall_s"] - off)
    return {"host_s": host, "device_s": device, "total_s": host + device}


# GPU memory: each framework that opens the GPU in a chapter keeps its largest pass's tensors
# reserved (PyTorch's and OneFlow's caching allocators hand freed blocks back to themselves, not
# to the GPU), and adds its CUDA context, library handles and workspaces, which no meta-device
# count sees. Assumed per framework until a GPU run measures it:
CONTEXT_GIB = 1.0


def gpu_memory(stem: str, gpu: str) -> dict[str, Any]:
    """GiB of GPU memory a chapter needs on ``gpu``: per framework that uses the GPU there
    (PyTorch; OneFlow where it has kernels, not on an H100; ONNX Runtime's GPU providers where
    the chapter builds a TensorRT engine), its largest pass's live tensors counted on the meta
    device, plus :data:`CONTEXT_GIB` each."""
    largest: dict[str, float] = {}
    for _, fw, p, _ in WORK.get(stem, []):
        if isinstance(p, str):
            if p == "tensorrt":
                largest.setdefault("onnxruntime", 0.0)
            continue
        if fw == "oneflow" and gpu == "H100":
            continue  # OneFlow on the CPU at quick sizes
        if fw == "torch~flow" and gpu == "H100" and p[0] != "matmul":
            p = _quick(p)
        name = "oneflow" if fw == "oneflow" else "torch"
        largest[name] = max(largest.get(name, 0.0), cost(p)["peak_bytes"] / 2**30)
    tensors = sum(largest.values())
    return {
        "tensors_gib": round(tensors, 2),
        "frameworks": sorted(largest),
        "need_gib": round(tensors + CONTEXT_GIB * len(largest), 2),
    }


GPU_NOTE = (
    "GPU estimates: host part (this CPU's full-size run, minus the cells that move to the "
    f"GPU) + device part (full mode's passes, each max(FLOPs / ({COMPUTE_EFF:.0%} of the "
    f"peak), bytes / ({MEMORY_EFF:.0%} of the bandwidth)) + {LAUNCH_S * 1e6:.0f} us per "
    f"operator; TF32 for float32 models; torch.compile {FIXED_S['compile']:.0f} s, "
    f"max-autotune {FIXED_S['compile_autotune']:.0f} s, a TensorRT engine "
    f"{FIXED_S['tensorrt']:.0f} s: assumptions). Estimates until a GPU run replaces them."
)


GPU_MEMORY_NOTE = (
    "GPU memory (a count until a GPU run measures it): per framework that uses the GPU in the "
    "chapter, the live tensors of its largest pass counted on PyTorch's meta device (weights, "
    "input, activations saved for the backward, gradients, AdamW's two moments in training), "
    f"plus {CONTEXT_GIB:g} GiB assumed per framework for its CUDA context, libraries and "
    "workspaces; OneFlow's and ONNX Runtime's passes counted as PyTorch's."
)


def table(head: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table's lines: the head, its rule and one line per row."""
    rule = "|" + "---|" * len(head)
    return [rule if r is None else f"| {' | '.join(map(str, r))} |" for r in [head, None, *rows]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-setup", action="store_true", help="also rewrite book/setup.md's table"
    )
    args = parser.parse_args(argv)
    folder = reference_folder()
    run = json.loads((folder / "full_cpu.json").read_text())
    out: dict[str, Any] = {
        "label": "estimate until a GPU run replaces it",
        "method": GPU_NOTE,
        "gpus": GPUS,
        "assumptions": {
            "compute_efficiency": COMPUTE_EFF,
            "memory_efficiency": MEMORY_EFF,
            "launch_s_per_operator": LAUNCH_S,
            "fixed_s": FIXED_S,
        },
        "passes": {},
        "chapters": {},
    }
    for stem, row in sorted(run["chapters"].items()):
        est = {g: estimate(stem, row, g) for g in GPUS}
        out["chapters"][stem] = {
            "full_cpu_s": row["wall_s"],
            "passed": row["passed"],
            **{g: {k: round(v, 1) for k, v in e.items()} for g, e in est.items()},
        }
    out["assumptions"]["context_gib_per_framework"] = CONTEXT_GIB
    out["gpu_memory_method"] = GPU_MEMORY_NOTE
    out["gpu_memory"] = {
        stem: {g: gpu_memory(stem, g) for g in GPUS}
        for stem in sorted(run["chapters"])
        if stem[:2].isdigit()
    }
    for p, c in _costs.items():
        out["passes"][" ".join(map(str, p))] = {
            "gflop": round(c["flops"] / 1e9, 2),
            "gbytes": round(c["bytes"] / 1e9, 2),
            "peak_gib": round(c["peak_bytes"] / 2**30, 2),
            "ops": c["ops"],
            "math": c["math"],
            **{g: round(device_seconds(p, g) * 1e3, 2) for g in GPUS},
        }
    out["full_cpu"] = {k: v["full_cpu_s"] for k, v in out["chapters"].items() if k[:2].isdigit()}
    out["gpu_estimate"] = {
        k: {g: v[g]["total_s"] for g in GPUS} for k, v in out["chapters"].items() if k[:2].isdigit()
    }
    (folder / "gpu_estimate.json").write_text(json.dumps(out, indent=1) + "\n")
    head = "# GPU estimate per chapter (an estimate until a GPU run replaces it)"
    lines = [head, "", GPU_NOTE, ""]
    lines += table(
        ["notebook", "CPU, full size (measured)", *(f"{g} (host + device)" for g in GPUS)],
        [
            [stem, _minutes(v["full_cpu_s"])]
            + [
                f"{_minutes(v[g]['total_s'])} ({_minutes(v[g]['host_s'])} + "
                f"{_minutes(v[g]['device_s'])})"
                for g in GPUS
            ]
            for stem, v in out["chapters"].items()
        ],
    )
    lines += ["", GPU_MEMORY_NOTE, ""]
    lines += table(
        ["notebook", *(f"{g} (GiB; frameworks on the GPU)" for g in GPUS)],
        [
            [stem]
            + [f"{v['need_gib']:.1f} ({', '.join(v['frameworks']) or '-'})" for v in per.values()]
            for stem, per in out["gpu_memory"].items()
        ],
    )
    lines += ["", "Each pass, on each GPU (ms):", ""]
    keys = ["gflop", "gbytes", "peak_gib", "ops", "math", *GPUS]
    lines += table(
        ["pass", "GFLOP", "GB moved", "live tensors, peak (GiB)", "operators", "math", *GPUS],
        [[name] + [p[k] for k in keys] for name, p in out["passes"].items()],
    )
    (folder / "GPU_ESTIMATE.md").write_text("\n".join(lines) + "\n")
    print(f"GPU estimate: {folder / 'GPU_ESTIMATE.md'}")
    if args.write_setup:  # the reference CPU's run, others beside it
        block = setup_block(run, out, other_runs(run))
        changed = ct._swap(SETUP, _SETUP_BLOCK, block, dry=False)
        print("book/setup.md:", "rewritten" if changed else "unchanged")
    return 0


def _full_runs() -> list[Path]:
    found = sorted((ROOT / "results" / "reference").glob("*-full-cpu/full_cpu.json"))
    if not found:
        raise SystemExit("no results/reference/*-full-cpu/full_cpu.json: run make fullcpu")
    return [f.parent for f in found]


def reference_folder() -> Path:
    """The ``make fullcpu`` folder of the reference CPU (the one chapter_times.json's quick
    run names); the newest folder where none matches it."""
    folders = _full_runs()
    machine = ct._load_times()["machine"] if ct.TIMES.exists() else None
    for f in folders:
        if machine and same_machine(
            json.loads((f / "full_cpu.json").read_text())["machine"], machine
        ):
            return f
    return max(folders, key=lambda f: json.loads((f / "full_cpu.json").read_text())["finished"])


def other_runs(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The committed ``make fullcpu`` runs of other CPUs than ``run``'s, in the order of their
    CPU numbers (``cpu_numbers``), then the oldest first."""
    runs = [json.loads((f / "full_cpu.json").read_text()) for f in _full_runs()]
    others = [r for r in runs if not same_machine(r["machine"], run["machine"])]
    others.sort(key=lambda r: r["finished"])
    numbers = cpu_numbers(others)
    return [r for _, r in sorted(zip(numbers, others, strict=True), key=lambda t: t[0])]


def cpu_numbers(others: list[dict[str, Any]]) -> list[int]:
    """The CPU number (2, 3 ...) each other run's CPU has on every page: the workshop's and
    the Time lines' numbering (chapter_times.json), so that "CPU 3" is one CPU throughout."""
    times = ct._load_times() if ct.TIMES.exists() else {}
    return ct.cpu_numbers(times, [o["machine"] for o in others])


SETUP = ROOT / "book" / "setup.md"
_SETUP_BLOCK = re.compile(r"(<!-- full-cpu:start[^>]*-->\n).*?(<!-- full-cpu:end -->)", re.S)


def setup_summary(run: dict[str, Any]) -> str:
    """The paragraph under book/setup.md's table, generated from the run it describes."""
    m, rows = run["machine"], run["chapters"]
    rerun = sorted(k for k, r in rows.items() if r.get("rerun"))
    days = sorted({r["started"][:10] for r in rows.values()})
    total = sum(r["wall_s"] for r in rows.values())
    passed = sum(r["passed"] for r in rows.values())
    text = (
        f"Measured {' and '.join(days)} on {describe_machine(m, memory=True)}, no GPU, "
        f"every notebook in a pytest process of its own (highest 1-minute load average "
        f"{max(r.get('load_max', 0) for r in rows.values()):.1f})"
        + (f"; {', '.join(rerun)} rerun after a change" if rerun else "")
        + f". {passed} of {len(rows)} pages pass; the whole run takes {total / 60:.0f} minutes"
    )
    pss = {k: r for k, r in rows.items() if "peak_pss_mib" in r}  # rows since PSS was read
    if pss:
        heavy = max(pss, key=lambda k: pss[k]["peak_pss_mib"])
        shared = max(pss, key=lambda k: pss[k]["peak_rss_mib"] / pss[k]["peak_pss_mib"])
        h, w = pss[heavy], pss[shared]
        text += (
            ". Peak memory: the largest sum over the process tree (Jupyter kernel and the "
            "processes it starts) of each process's proportional memory (PSS), which counts a "
            f"page that n processes share 1/n in each. The heaviest, {heavy}, peaked at "
            f"{h['peak_pss_mib'] / 1024:.1f} GiB; the sum of resident memory, which counts "
            f"shared pages once per process, read {h['peak_rss_mib'] / 1024:.1f} GiB there"
        )
        if shared != heavy and w["peak_rss_mib"] > 1.5 * w["peak_pss_mib"]:
            text += (
                f", and {w['peak_rss_mib'] / 1024:.1f} GiB against "
                f"{w['peak_pss_mib'] / 1024:.1f} GiB for {shared}, whose processes share "
                "most of their pages"
            )
    cells = sorted(
        ((c["seconds"], k, c["cell"]) for k, r in rows.items() for c in r.get("cells_timed", [])),
        reverse=True,
    )[:6]
    if cells:
        named = ", ".join(f"{k} cell {n} ({_minutes(sec)})" for sec, k, n in cells)
        share = sum(sec for sec, _, _ in cells) / total
        text += f". The six slowest cells, {share:.0%} of the run: {named}"
    return textwrap.fill(text + ".", 100)


def training_summary(run: dict[str, Any], whose: str = "this run") -> str:
    """What the run's trainings reached held out against each page's bar (``trainings``, read
    by tools/full_cpu_run.py from what each training cell printed); ``whose`` names the run."""
    rows = run["chapters"]
    if not all("trainings" in r for r in rows.values()):
        return textwrap.fill(
            whose[0].upper()
            + whose[1:]
            + " predates the recording of each training's result (its held-out accuracy "
            "and the bar its page asserts it above); `make fullcpu` records them from its next "
            "run on, and each training cell prints them.",
            100,
        )
    steps = run["machine"]["sizes"]["train_steps"]
    done = [(k, t) for k, r in sorted(rows.items()) for t in r["trainings"]]
    if not done:
        return "No page trained a model in this run."
    named = "; ".join(
        f"{k} cell {t['cell']}, {t['steps']} steps of batch {t['batch']} in "
        f"{_minutes(t['train_s'])} on {t['device']}: {t['accuracy']:.1%}"
        + (f" against the bar of {t['bar']:.1%}" if t["bar"] is not None else "")
        for k, t in done
    )
    margins = [
        (t["accuracy"] - t["bar"], k)
        for k, t in done
        if t["bar"] is not None and t["steps"] == steps
    ]
    text = (
        "A page that trains its network asserts its held-out accuracy above a bar (chance plus "
        "three standard errors of a guessing model's score) before it checks reduced precision "
        "on what the network decides. Full mode's training runs here at "
        f"{steps} steps, a tenth of its own (chapters 2 and 8 train at quick sizes wherever "
        "they train on a CPU). In " + whose + ": " + named + "."
    )
    if margins:
        low = min(margins)
        text += (
            f" The smallest margin at {steps} steps: {low[0] * 100:.1f} points ({low[1]}); "
            "fewer steps would have to clear the same bar."
        )
    return textwrap.fill(text, 100)


def others_summary(run: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """The paragraph on the other CPUs' full-size runs: what each is, what passed, and its
    time against the reference CPU's over the chapters both ran."""
    if not others:
        return ""
    texts, numbers = [], cpu_numbers(others)
    for n, o in zip(numbers, others, strict=True):
        m, rows = o["machine"], o["chapters"]
        both = sorted(k for k, r in rows.items() if r["passed"] and k in run["chapters"])
        ratio = {k: rows[k]["wall_s"] / run["chapters"][k]["wall_s"] for k in both}
        gap = {k: rows[k]["wall_s"] - run["chapters"][k]["wall_s"] for k in both}
        far = max(gap, key=lambda k: abs(gap[k]))  # what a plan feels: minutes, not a ratio
        more = f"{_minutes(abs(gap[far]))} {'more' if gap[far] >= 0 else 'less'}"
        cells = sorted((c["seconds"], c["cell"]) for c in rows[far].get("cells_timed", []))
        slow = ", ".join(f"cell {c} ({_minutes(sec)})" for sec, c in reversed(cells[-3:]))
        missing = sorted(set(run["chapters"]) - set(rows))
        days = sorted({r["started"][:10] for r in rows.values()})
        text = (
            f"CPU {n} ({describe_machine(m, memory=True)}) ran "
            f"{len(rows)} of the pages on {' and '.join(days)} (highest 1-minute load average "
            f"{max(r.get('load_max', 0) for r in rows.values()):.1f}): "
            f"{sum(r['passed'] for r in rows.values())} pass"
            + (f"; not run there: {', '.join(missing)}" if missing else "")
            + f". Over the chapters that passed on both CPU 1 and CPU {n}, it took "
            f"{sum(rows[k]['wall_s'] for k in both) / 60:.0f} minutes against "
            f"{sum(run['chapters'][k]['wall_s'] for k in both) / 60:.0f} on CPU 1, from "
            f"{min(ratio.values()):.1f}x to {max(ratio.values()):.1f}x CPU 1's time per "
            f"chapter; the furthest apart in minutes, {far} ({ratio[far]:.1f}x, {more}), spent "
            f"longest in {slow}."
        )
        texts.append(text)
    times = ct._load_times() if ct.TIMES.exists() else {}
    for n, o in ct._numbered(times, "quick_also"):  # CPUs that left quick-mode times only
        if n not in numbers:
            texts.append(
                f"CPU {n} ({describe_machine(o['machine'])}) has quick-mode times only "
                "(book/workshop.md): no full-size run of it is committed."
            )
    return textwrap.fill(" ".join(texts), 100)


def setup_block(run: dict[str, Any], est: dict[str, Any], others: list[dict[str, Any]] = ()) -> str:
    """book/setup.md's generated part: the table and the paragraphs under it."""
    parts = [setup_table(run, est, others), setup_summary(run), others_summary(run, list(others))]
    parts.append(training_summary(run, "CPU 1's run" if others else "this run"))
    if not all("trainings" in r for r in run["chapters"].values()):  # another CPU's, if recorded
        parts += [
            training_summary(o, f"CPU {n}'s run")
            for n, o in zip(cpu_numbers(list(others)), others, strict=True)
            if o["chapters"] and all("trainings" in r for r in o["chapters"].values())
        ]
    return "\n\n".join(p for p in parts if p) + "\n"


def setup_table(run: dict[str, Any], est: dict[str, Any], others: list[dict[str, Any]] = ()) -> str:
    """The per-chapter table of book/setup.md: measured CPU time and memory, GPU estimates;
    with other CPUs' full-size runs, a column of wall times for each (CPU 2, 3 ...)."""
    first = "CPU 1, full size" if others else "2-core CPU, full size"
    head = ["chapter", f"{first} (measured)", f"peak memory{' (CPU 1)' if others else ''}"]
    head += [f"CPU {n}, full size (measured)" for n in cpu_numbers(list(others))]

    def wall(r: dict[str, Any] | None) -> str:
        if r is None:
            return "not run"
        return _minutes(r["wall_s"]) + ("" if r["passed"] else " (failed)")

    rows = [
        [stem, wall(r), f"{r.get('peak_pss_mib', r['peak_rss_mib']) / 1024:.1f} GiB"]
        + [wall(o["chapters"].get(stem)) for o in others]
        + [_minutes(est["chapters"][stem][g]["total_s"]) for g in GPUS]
        for stem, r in sorted(run["chapters"].items())
    ]
    return "\n".join(table(head + [f"{g} (estimate)" for g in GPUS], rows))


if __name__ == "__main__":
    raise SystemExit(main())
