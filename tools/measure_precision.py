"""Measure what the precision policy's accumulation factors rest on (``helpers.core.precision``).

For each case, a network with random weights and BatchNorm calibrated on the course's images, on
this CPU: :func:`helpers.core.precision.measure_accumulation` (the largest error of float64,
float32 channels-last, emulated TF32, bf16 autocast and fp16 against the plain float32 output, as
a fraction of the output's scale, in units of each way's rounding: u + log2(4608) u_fp32), and two
planted bugs (every BatchNorm's eps x100, one convolution's weights x 1.01) to show how far
outside a real bug lands. Any classifier: a torchvision name, ``embedder`` (the course's
MobileNetV2 embedder), or ``package.module:function`` (your builder, called with
``num_classes=``); write ``@size:batch`` after it.

    .venv/bin/python tools/measure_precision.py [--cases resnet18@64:32 mobilenet_v3_small@64:32 ...]

Prints one row per case, with the factor the policy would give it (twice the largest, a power of
two); NETWORK_ACCUMULATION holds those of the course's own networks.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

DEFAULT = [
    "resnet18@64:32",
    "resnet18@224:8",
    "resnet50@112:8",
    "resnet101@112:8",
    "embedder@64:32",
]


def measure(arch: str, size: int, batch: int) -> dict[str, float]:
    """Errors in policy units of each way of computing ``arch`` at ``size`` px, ``batch`` images,
    the two planted bugs', and the factor the policy would give it."""
    import torch

    from helpers.core import precision
    from helpers.workload import data, models

    torch.manual_seed(0)
    if arch == "embedder":
        m = models.build_embedder("torch", dim=128, width_mult=0.5)
    else:
        m = models.build_classifier("torch", arch, num_classes=8)
    x = torch.from_numpy(data.normalize(data.make_images(batch, size, seed=1)[0]))
    models.calibrate_batchnorm(m, x)
    m.eval()
    found = precision.measure_accumulation(m, x, name=arch, register=False)
    with torch.no_grad():
        f32 = m(x)
        scale = float(f32.abs().max())
        eps = copy.deepcopy(m)
        for mod in eps.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.eps *= 100
        w = copy.deepcopy(m)
        convs = [mod for mod in w.modules() if isinstance(mod, torch.nn.Conv2d)]
        convs[len(convs) // 2].weight.mul_(1.01)
        bugs = {"bug: BatchNorm eps": eps(x), "bug: conv x1.01": w(x)}
    fp32 = precision.tolerance("fp32", accumulation=1.0).rtol  # one unit of float32
    return {
        **found.units,
        **{k: float((v - f32).abs().max()) / scale / fp32 for k, v in bugs.items()},
        "factor": found.factor,
    }


def _case(text: str) -> tuple[str, int, int]:
    arch, _, sizes = text.rpartition("@")
    size, _, batch = sizes.partition(":")
    if not arch or not size.isdigit() or not batch.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: write arch@size:batch, e.g. resnet18@64:32")
    return arch, int(size), int(batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", type=_case, default=[_case(c) for c in DEFAULT])
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    for arch, size, batch in args.cases:
        row = measure(arch, size, batch)
        case = f"{arch}@{size}:{batch}"
        print(f"{case:24s} " + "  ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
