"""Benchmark the CPU deployment target: ResNet-101, 224x224, batch 16, every CPU runtime and precision.

Times fp32 eager PyTorch (the baseline), PyTorch bf16 autocast + channels-last, ONNX Runtime fp32,
OpenVINO bf16, ONNX Runtime INT8 (QDQ, U8S8) and OpenVINO INT8 (NNCF; one stream, and the batch split
across streams) in interleaved rounds, all on the same threads (set explicitly, printed per row).
Prints one table (seconds per batch with its interquartile range, ratio to eager, % of the ceiling
of the variant's own precision from :func:`helpers.measure.roofline.ceilings`, and the held-out
accuracy of the same recipe on chapter 8's trained classifier) and writes it as JSON.

Speed does not depend on what the weights learned, so the timed ResNet-101 has random weights with
BatchNorm statistics set from images; accuracy needs a trained model, and training ResNet-101 at
224x224 is not a 2-core job, so each recipe's accuracy is measured on chapter 8's trained model
(the mode's architecture and size), with the same quantization settings. The machine's load is
read before and after; a contended run is flagged (ratios between runtimes move under contention,
because runtimes suffer from it unequally).

A benchmark, not a test: nothing here asserts a speed. Usage::

    python tools/bench_cpu_deploy.py [--threads 2] [--repeats 7] [--json PATH] [--no-accuracy]
                                     [--fail-if-contended]

``make bench`` runs it after the chapters with ``--fail-if-contended`` and publishes its JSON in
the reference folder only when the run was quiet (exit status 3 otherwise, JSON still written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

GOAL = 8.0  # the course's goal for the best CPU path, x fp32 eager PyTorch
MAX_DROP_POINTS = 1.0  # ... with at most this many points of accuracy lost


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from helpers.deploy import runtimes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=runtimes.cpu_threads())
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--streams", type=int, default=2, help="OpenVINO streams of the split variant")
    p.add_argument("--calibration", type=int, default=32, help="calibration images")
    p.add_argument("--no-accuracy", action="store_true", help="skip training the accuracy model")
    p.add_argument(
        "--json", type=Path, default=ROOT / "results" / "cpu_deploy" / "resnet101_b16.json"
    )
    p.add_argument("--work-dir", type=Path, default=None, help="where models are written")
    p.add_argument(
        "--fail-if-contended",
        action="store_true",
        help="exit with status 3 when other processes shared the cores (make bench)",
    )
    args = p.parse_args(argv)
    if args.threads < 1 or args.batch < 1 or args.repeats < 1 or args.warmup < 0:
        p.error("threads, batch and repeats must be positive, warmup non-negative")
    if not 1 <= args.streams <= args.threads:
        p.error(f"--streams must be between 1 and --threads ({args.threads})")
    return args


def _accuracy(args: argparse.Namespace, work: Path, names: list[str], bf16: bool) -> dict:
    """Held-out accuracy of each recipe on chapter 8's trained classifier (the mode's sizes)."""
    import torch

    from helpers.chapters import ch08_cpu_target as cpu_target
    from helpers.core.environment import seed_everything, sizes
    from helpers.deploy import export
    from helpers.workload import data, models, training

    S = sizes()
    seed_everything(0)
    size = S.image_size // 2 if S.mode == "quick" else S.image_size  # as chapter 8 trains
    train, val = data.make_splits(S.train_images, S.val_images, size, num_classes=S.num_classes)
    net = models.build_resnet("torch", S.arch, num_classes=S.num_classes)
    start = time.perf_counter()
    result = training.train_classifier(net, train, steps=4 * S.train_steps, batch_size=64, val=val)
    print(f"trained {S.arch} at {size}px in {time.perf_counter() - start:.0f} s: {result}")
    net = net.cpu().eval()
    onnx_path = export.export_and_verify(
        net, torch.from_numpy(val.x[:2]), work / f"{S.arch}_trained.onnx"
    ).path
    variants = cpu_target.build_variants(
        net,
        onnx_path,
        train.x[: S.train_images // 16],  # chapter 8's calibration set: training images only
        threads=args.threads,
        work_dir=work / "trained",
        which=names,
        bf16=bf16,
        streams=args.streams,
    )
    acc = {}
    for name, v in variants.items():
        logits = np.concatenate([v.call(val.x[i : i + 64]) for i in range(0, len(val.x), 64)])
        acc[name] = float(np.mean(logits.argmax(1) == val.y))
    return {
        "model": f"{S.arch}, {size}x{size}, trained on the generated dataset ({S.mode} mode)",
        "val_images": len(val.x),
        "accuracy": acc,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from helpers.chapters import ch08_cpu_target as cpu_target
    from helpers.core import comparison, precision
    from helpers.core.environment import environment_report, seed_everything
    from helpers.deploy import export
    from helpers.measure import roofline
    from helpers.record import ledger
    from helpers.show import Table
    from helpers.workload import data, models

    torch.set_num_threads(args.threads)
    seed_everything(0)
    report = environment_report()
    bf16 = bool({"avx512_bf16", "amx_bf16"} & set(report["cpu_features"]))
    print(f"CPU: {report['cpu']}, {report['cores']} cores; features {report['cpu_features']}")
    print(f"threads for every runtime: {args.threads}; load average {os.getloadavg()[0]:.2f}")
    ceilings = roofline.ceilings("cpu", n=2048, repeats=3)
    print("ceilings (GFLOP/s, int8 GOP/s):", {k: round(v) for k, v in ceilings.items()})

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_cpu_deploy_"))
    work.mkdir(parents=True, exist_ok=True)
    n_img = args.batch + args.calibration
    x_all = data.normalize(data.make_images(n_img, args.image_size, seed=5, num_classes=8)[0])
    xb, calib = np.ascontiguousarray(x_all[: args.batch]), x_all[args.batch :]
    r101 = models.build_resnet("torch", "resnet101", num_classes=8)
    models.calibrate_batchnorm(r101, torch.from_numpy(xb))
    r101.eval()
    onnx_path = export.export_and_verify(r101, torch.from_numpy(xb[:2]), work / "resnet101.onnx")
    start = time.perf_counter()
    variants = cpu_target.build_variants(
        r101,
        onnx_path.path,
        calib,
        threads=args.threads,
        work_dir=work,
        bf16=bf16,
        streams=args.streams,
    )
    print(f"built {len(variants)} variants in {time.perf_counter() - start:.0f} s")
    flops = roofline.count_flops(r101, torch.from_numpy(xb))

    # Each variant against fp32 eager with the precision policy's bound for its own mode.
    want = variants["PyTorch eager fp32"].call(xb)
    checks = {}
    for name, v in variants.items():
        tol = precision.tolerance(v.precision, scale=precision.output_scale(want))
        cmp = comparison.assert_outputs_close(v.call(xb), want, **tol.as_kwargs(), name=name)
        checks[name] = {"mode": v.precision, "max_abs": cmp.max_abs, "atol": tol.atol}

    rows, runs = cpu_target.measure_variants(
        variants,
        xb,
        warmup=args.warmup,
        repeats=args.repeats,
        flops=flops,
        ceilings=ceilings,
        progress=True,
    )
    # A ceiling is a best case: measure it again after the rounds and keep the better of the two,
    # so a burst of load during one measurement does not lower it (and inflate every % of it).
    again = roofline.ceilings("cpu", n=2048, repeats=3)
    print("ceilings again after the rounds:", {k: round(v) for k, v in again.items()})
    ceilings = cpu_target.best_ceilings(rows, ceilings, again)
    if any(r.get("over_ceiling") for r in rows):
        print(
            "note: a row exceeds its ceiling (measured under load, or its kernels beat the ceiling's)"
        )

    acc_info = None
    if not args.no_accuracy:
        acc_info = _accuracy(args, work, list(variants), bf16)
        base_acc = acc_info["accuracy"]["PyTorch eager fp32"]
        for r in rows:
            a = acc_info["accuracy"].get(r["variant"])
            r["accuracy"] = a
            r["drop_points"] = None if a is None else 100 * (base_acc - a)
    # the course's one rule (helpers.measure.machine.CONTENDED_SHARE), on the timed rounds themselves
    contended = any(m.contended for m in runs.values())
    load = ledger.on_machine(*runs.values())["load"]
    print()
    print(
        f"ResNet-101, {args.image_size}x{args.image_size}, batch {args.batch}, "
        f"{args.threads} threads, {args.repeats} interleaved rounds"
        + ("  ** CONTENDED: other processes shared the cores **" if contended else "")
    )
    print(Table(cpu_target.format_rows(rows)))
    if acc_info:
        print(f"accuracy: each recipe on {acc_info['model']}, {acc_info['val_images']} images")
    ok = [
        r
        for r in rows
        if r["variant"] != "PyTorch eager fp32"
        and (r.get("drop_points") is None or r["drop_points"] <= MAX_DROP_POINTS)
    ]
    best = max(ok, key=lambda r: r["vs_eager"])
    eager_s = runs["PyTorch eager fp32"].median
    need = GOAL * flops / eager_s / 1e9
    print(
        f"best path: {best['variant']} at {best['vs_eager']:.2f}x fp32 eager "
        f"({'meets' if best['vs_eager'] >= GOAL else 'below'} the {GOAL:.0f}x goal). "
        f"{GOAL:.0f}x eager would need {need:.0f} GOP/s"
        + (
            f", {100 * need / ceilings['int8']:.0f}% of this CPU's measured int8 ceiling"
            if "int8" in ceilings
            else ""
        )
    )
    out = {
        "workload": {
            "model": "resnet101",
            "image_size": args.image_size,
            "batch": args.batch,
            "flops_per_batch": flops,
        },
        "threads": args.threads,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "cpu": report["cpu"],
        "cpu_features": report["cpu_features"],
        "libraries": report.get("libraries"),
        "ceilings": ceilings,
        "load": load,
        "contended": contended,
        "rows": rows,
        "settings": {k: v.settings for k, v in variants.items()},
        "checks": checks,
        "accuracy_model": acc_info and {k: acc_info[k] for k in ("model", "val_images")},
        "best": best["variant"],
        "goal": GOAL,
        "times_s": {k: list(getattr(m, "times_s", None) or m.times) for k, m in runs.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.json}")
    if contended and args.fail_if_contended:
        print(
            "the run was contended (other processes kept up to "
            f"{load['others_cores_max'] or 0:.2f} cores busy while it was timed): "
            "not a reference; rerun on a quiet machine",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
