"""Benchmark the CPU deployment target: ResNet-101, 224x224, batch 16, every CPU runtime and precision.

Times fp32 eager PyTorch (the baseline), PyTorch bf16 autocast + channels-last, ONNX Runtime fp32,
OpenVINO bf16, ONNX Runtime INT8 (QDQ, U8S8) and OpenVINO INT8 (NNCF; one stream, and the batch split
across streams) in interleaved rounds on the same threads. Prints one table (seconds per batch with
its IQR, ratio to eager, % of the ceiling of the variant's own precision,
:func:`helpers.measure.roofline.ceilings`, held-out accuracy), the best path within
``MAX_DROP_POINTS`` of accuracy among those that passed chapter 8's INT8 rule
(:func:`helpers.core.comparison.assert_classifier_logits`), and the bound the measured int8 ceiling
sets on any path; writes it all as JSON.

Speed does not depend on what the weights learned, so the timed ResNet-101 has random weights with
BatchNorm statistics set from images. Accuracy, and the task-level check of the reduced precisions
(on random weights every image's logits sit so close together that the check could not tell a right
recipe from a wrong one), use chapter 8's trained model (the mode's architecture and size: training
ResNet-101 at 224x224 is not a 2-core job) with the same quantization settings. A run during which
other processes took the cores is flagged (runtimes suffer from contention unequally). A benchmark,
not a test: nothing here asserts a speed.

    python tools/bench_cpu_deploy.py [--threads 2] [--repeats 7] [--json PATH] [--no-accuracy]
                                     [--fail-if-contended]

``make bench`` passes ``--fail-if-contended``: exit status 3 on a contended run (JSON still
written), so that only a quiet run is published in the reference folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from helpers.core.hardware import describe_machine, machine_facts  # noqa: E402
from helpers.core.scratch import scratch_dir  # noqa: E402

MAX_DROP_POINTS = 1.0  # the best path loses at most this many points of accuracy
MAX_RULE_DROP = 0.02  # the INT8 rule's accuracy drop (a fraction), as in chapter 8
BATCH, IMAGE_SIZE, WARMUP, CALIBRATION = 16, 224, 2, 32  # calibration: images for INT8
STREAMS = 2  # OpenVINO streams of the split variant


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from helpers.core.threads import available_cores

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=available_cores())
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--no-accuracy", action="store_true", help="skip training the accuracy model")
    p.add_argument(
        "--json", type=Path, default=ROOT / "results" / "cpu_deploy" / "resnet101_b16.json"
    )
    p.add_argument(
        "--fail-if-contended",
        action="store_true",
        help="exit with status 3 when other processes shared the cores (make bench)",
    )
    args = p.parse_args(argv)
    if args.repeats < 1 or args.threads < STREAMS:
        p.error(f"--repeats must be positive and --threads at least {STREAMS} (OpenVINO streams)")
    return args


def _accuracy(args: argparse.Namespace, work: Path, names: list[str], bf16: bool) -> dict:
    """Held-out accuracy of each recipe on chapter 8's classifier, trained as chapter 8 does (on
    the GPU when there is one, at ``sizes_on``'s sizes), refused when it did not learn (held-out
    accuracy below four times chance: its accuracies would compare nothing)."""
    import torch

    from helpers.chapters import ch08_cpu_target as cpu_target
    from helpers.chapters import ch08_report
    from helpers.core.environment import seed_everything, sizes_on, torch_device
    from helpers.deploy import export
    from helpers.workload import data, models, training

    device = torch_device()
    S = sizes_on(device)
    seed_everything(0)
    size = S.image_size // 2 if S.mode == "quick" else S.image_size  # as chapter 8 trains
    train, val = data.make_splits(S.train_images, S.val_images, size, num_classes=S.num_classes)
    net = models.build_classifier("torch", S.arch, num_classes=S.num_classes).to(device)
    start = time.perf_counter()
    result = training.train_classifier(net, train, steps=4 * S.train_steps, val=val)
    print(f"trained {S.arch} at {size}px in {time.perf_counter() - start:.0f} s: {result}")
    if result.val_accuracy < 4 / S.num_classes:
        raise SystemExit(f"the accuracy model did not learn ({result.val_accuracy:.1%})")
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
        streams=STREAMS,
    )
    from helpers.core import comparison

    acc, logits, checks = {}, {}, {}
    for name, v in variants.items():
        out = np.concatenate([v.call(val.x[i : i + 64]) for i in range(0, len(val.x), 64)])
        acc[name], logits[name] = float(np.mean(out.argmax(1) == val.y)), out
    for name, v in variants.items():  # reduced precisions at task level, as chapter 8 records
        if v.precision == "fp32":
            continue
        try:  # chapters 8 and 10's one rule for a classifier's logits
            task = comparison.assert_classifier_logits(
                logits[name],
                logits["PyTorch eager fp32"],
                val.y,
                mode=v.precision,
                network=S.arch,
                max_drop=MAX_RULE_DROP,
                name=name,
            )
            checks[name] = {
                "passed": True,
                "nearest_own_class": task.nearest_own,
                "top1_agreement": task.top1,
                "accuracy_drop_points": task.accuracy_drop,
            }
        except AssertionError as err:  # recorded: a failed path is never the best one
            checks[name] = {"passed": False, "failed": str(err)}
        print(f"task level on the trained model, {name}: {checks[name]}")
    return {
        "model": f"{ch08_report.model_name(S.arch)} trained, {size} px",
        "val_images": len(val.x),
        "accuracy": acc,
        "checks": checks,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from helpers.chapters import ch08_cpu_target as cpu_target
    from helpers.chapters import ch08_report
    from helpers.core import comparison
    from helpers.core.environment import environment_report, seed_everything
    from helpers.deploy import export
    from helpers.measure import roofline
    from helpers.record import ledger
    from helpers.workload import data, models

    torch.set_num_threads(args.threads)
    seed_everything(0)
    report = environment_report()
    bf16 = bool({"avx512_bf16", "amx_bf16"} & set(report["flags"]))
    print(f"CPU: {describe_machine()}; flags {report['flags']}")
    print(f"threads for every runtime: {args.threads}; load average {os.getloadavg()[0]:.2f}")
    ceilings = roofline.ceilings("cpu", n=2048, repeats=3)
    print("ceilings (GFLOP/s, int8 GOP/s):", {k: round(v) for k, v in ceilings.items()})

    work = scratch_dir("bench_cpu_deploy-")  # removed at exit, or by the next run if killed
    x_all = data.normalize(data.make_images(BATCH + CALIBRATION, IMAGE_SIZE, seed=5)[0])
    xb, calib = np.ascontiguousarray(x_all[:BATCH]), x_all[BATCH:]
    r101 = models.build_classifier("torch", "resnet101", num_classes=8)
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
        streams=STREAMS,
    )
    print(f"built {len(variants)} variants in {time.perf_counter() - start:.0f} s")
    flops = roofline.count_flops(r101, torch.from_numpy(xb))

    # Each float32 variant against fp32 eager within the float32 bound. The reduced ones are
    # checked at task level on the trained model (_accuracy, chapter 8's way): on these random
    # weights every image's logits sit so close together that a bf16 rounding moves most rows
    # nearer another image's (measured: 25% nearest their own), so the check could not tell a
    # right recipe from a wrong one (an elementwise bf16 or int8 bound could not fail either).
    want = variants["PyTorch eager fp32"].call(xb)
    checks = {}
    for name, v in variants.items():
        if v.precision == "fp32":
            cmp = comparison.assert_outputs_close(
                v.call(xb), want, mode="fp32", network="resnet101", name=name
            )
            checks[name] = {"mode": "fp32", "max_abs": cmp.max_abs, "bound_used": cmp.used}
        else:
            got = v.call(xb)
            if got.shape != want.shape or not np.isfinite(got).all():
                raise AssertionError(f"{name}: {got.shape} output with non-finite values")
            checks[name] = {"mode": v.precision, "task_level": "on the trained model"}

    rows, runs = cpu_target.measure_variants(
        variants,
        xb,
        warmup=WARMUP,
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
    if args.no_accuracy:
        for c in checks.values():
            if "task_level" in c:
                c["task_level"] = "not checked (--no-accuracy)"
        print("--no-accuracy: the reduced precisions are not checked at task level")
    else:
        acc_info = _accuracy(args, work, list(variants), bf16)
        base_acc = acc_info["accuracy"]["PyTorch eager fp32"]
        for name, found in acc_info["checks"].items():
            checks[name].update(found)
        for r in rows:
            a = acc_info["accuracy"].get(r["variant"])
            r["accuracy"] = a
            r["drop_points"] = None if a is None else 100 * (base_acc - a)
            r["passed"] = acc_info["checks"].get(r["variant"], {}).get("passed", True)
    # the course's one rule (helpers.measure.machine.CONTENDED_SHARE), on the timed rounds themselves
    contended = any(m.contended for m in runs.values())
    load = ledger.on_machine(*runs.values())["load"]
    print()
    print(
        f"ResNet-101, {IMAGE_SIZE}x{IMAGE_SIZE}, batch {BATCH}, "
        f"{args.threads} threads, {args.repeats} interleaved rounds"
        + ("  ** CONTENDED: other processes shared the cores **" if contended else "")
    )
    label = f"accuracy ({acc_info['model']})" if acc_info else "accuracy"
    print(ch08_report.variants_table(rows, label))
    for r in rows:  # without accuracy every variant qualifies
        r.setdefault("drop_points", 0.0)
    best = cpu_target.best_path(rows, MAX_DROP_POINTS, passed_only=True)  # never a failed one
    eager_gops = flops / runs["PyTorch eager fp32"].median / 1e9
    bound = ceilings["int8"] / eager_gops if ceilings.get("int8") else None
    print(
        f"best path within {MAX_DROP_POINTS:g} point(s) of accuracy that passed the INT8 rule: "
        f"{best['variant']} at "
        f"{best['vs_eager']:.2f}x fp32 eager"
        + (
            f"; the measured int8 ceiling bounds any path at {bound:.1f}x eager "
            f"(best path: {best['vs_eager'] / bound:.0%} of it)"
            if bound
            else ""
        )
    )
    out = {
        "workload": {
            "model": "resnet101",
            "image_size": IMAGE_SIZE,
            "batch": BATCH,
            "flops_per_batch": flops,
        },
        "threads": args.threads,
        "warmup": WARMUP,
        "repeats": args.repeats,
        "machine": machine_facts(),
        "libraries": report.get("libraries"),
        "ceilings": ceilings,
        "load": load,
        "contended": contended,
        "rows": [{**r, "ratio": r["ratio"].as_record()} for r in rows],
        "settings": {k: v.settings for k, v in variants.items()},
        "checks": checks,
        "accuracy_model": acc_info and {k: acc_info[k] for k in ("model", "val_images")},
        "best": best["variant"],
        "int8_ceiling_bound": bound,
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
