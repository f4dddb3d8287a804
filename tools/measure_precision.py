"""Measure what the precision policy's accumulation factors rest on (``helpers.core.precision``).

For each network of the course, random weights with BatchNorm calibrated on the course's images,
on this CPU: the largest error of a result computed another way (float64, float32 channels-last,
TF32 emulated, fp16, bf16 autocast) against the plain float32 output, as a fraction of the output's
scale, in units of the mode's rounding (u + log2(4608) u_fp32). Two planted bugs (BatchNorm eps
1e-5 -> 1e-3, one convolution's weights x 1.01) show how far outside a real bug lands.

    .venv/bin/python tools/measure_precision.py [--cases resnet18:64:32 resnet101:112:8 ...]

Prints one row per case; NETWORK_ACCUMULATION gives each network about twice its largest row.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

DEFAULT = [
    "resnet18:64:32",
    "resnet18:224:8",
    "resnet50:112:8",
    "resnet101:112:8",
    "embedder:64:32",
]


def _units(mode: str) -> float:
    from helpers.core import precision

    u = precision.UNIT_ROUNDOFF
    return u[mode] + math.log2(precision.REDUCTION) * u["fp32"]


def measure(arch: str, size: int, batch: int) -> dict[str, float]:
    """Errors in policy units of each way of computing ``arch`` at ``size`` px, ``batch`` images."""
    import torch

    from helpers.core import precision
    from helpers.workload import data, models

    torch.manual_seed(0)
    if arch == "embedder":
        m = models.build_embedder("torch", dim=128, width_mult=0.5)
    else:
        m = models.build_resnet("torch", arch, num_classes=8)
    x = torch.from_numpy(data.normalize(data.make_images(batch, size, seed=1)[0]))
    models.calibrate_batchnorm(m, x)
    m.eval()
    with torch.no_grad():
        f32 = m(x)
        scale = float(f32.abs().max())
        out = {"float64": copy.deepcopy(m).double()(x.double()).float()}
        cl = copy.deepcopy(m).to(memory_format=torch.channels_last)
        out["fp32 channels_last"] = cl(x.to(memory_format=torch.channels_last))
        with precision.emulate_tf32(m):
            out["tf32"] = m(x)
        out["fp16"] = copy.deepcopy(m).half()(x.half()).float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out["bf16"] = m(x).float()
        eps = copy.deepcopy(m)
        for mod in eps.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.eps = 1e-3
        out["bug: BatchNorm eps"] = eps(x)
        w = copy.deepcopy(m)
        convs = [mod for mod in w.modules() if isinstance(mod, torch.nn.Conv2d)]
        convs[len(convs) // 2].weight.mul_(1.01)
        out["bug: conv x1.01"] = w(x)
    mode_of = {"tf32": "tf32", "fp16": "fp16", "bf16": "bf16"}
    return {
        k: float((v - f32).abs().max()) / scale / _units(mode_of.get(k, "fp32"))
        for k, v in out.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=DEFAULT, help="arch:size:batch")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    for case in args.cases:
        arch, size, batch = case.split(":")
        row = measure(arch, int(size), int(batch))
        print(f"{case:18s} " + "  ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
