"""Full mode's training recipes at their full step counts, at a smaller image size, on the CPU.

``make fullcpu`` trains at a tenth of full mode's steps (chapters 6 and 10) or at quick sizes
(chapters 2 and 8, whose training follows the device OneFlow or PyTorch runs on). So whether a
page's full-mode recipe learns at all in its full step count is first seen on a GPU. This runs
each recipe with the page's network, steps, batch, optimiser and initialisation, on images of
``--size`` pixels instead of 224 (a 224 px run of chapter 8's recipe would take hours on two
cores), and asserts what the page asserts. It is a proxy: ``tests/gpu`` runs the same recipes
at 224 px when a GPU is lent.

    python tools/training_proxy.py [--size 64] [--only ch2 ch2-default ch8] [--json FILE]

Default output: ``results/reference/<cpu>-full-cpu/training_proxy.json`` and a table beside it
(``training_proxy.md``). About 4 min per
chapter 2 recipe and 30 min for chapter 8's on a 2-core Xeon at 64 px.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from helpers.core.hardware import describe_machine, machine_facts  # noqa: E402

# name: (the page, the network, zero-init, steps as a multiple of full mode's, batch, the bar)
RECIPES: dict[str, dict[str, Any]] = {
    "ch2": dict(page="02, cell 9", net="BusinessModel", zero_init=True, times=1, batch=32,
                bar="3 SE above chance"),
    "ch2-default": dict(page="02, cell 9, without zero-init (the control)", net="BusinessModel",
                        zero_init=False, times=1, batch=32, bar="3 SE above chance"),
    "ch8": dict(page="08, cell 4", net="resnet", zero_init=False, times=4, batch=64,
                bar="4x chance"),
}  # fmt: skip


def bar(kind: str, samples: int, classes: int) -> float:
    """The held-out accuracy the page asserts above (chapter 2) or at least (chapter 8)."""
    from helpers.workload.training import above_chance_bar

    return 4 / classes if kind == "4x chance" else above_chance_bar(samples, classes)


def run(name: str, size: int, device: str = "cpu", splits: Any = None) -> dict[str, Any]:
    """Train recipe ``name`` at ``size`` px on ``device`` from the page's seed; its result and
    the bar. ``splits``: the (train, held-out) images at ``size`` px, when already made."""
    import numpy as np
    import torch

    from helpers.core import environment
    from helpers.workload import data, models, predict, team_model, training

    r, full = RECIPES[name], environment.SIZES["full"]
    environment.seed_everything(0)
    train, val = splits or data.make_splits(
        full.train_images, full.val_images, size, num_classes=full.num_classes
    )
    environment.seed_everything(0)  # the model's weights: the same with or without splits
    if r["net"] == "BusinessModel":
        kw = dict(num_classes=full.num_classes, zero_init_residual=r["zero_init"])
        model = team_model.BusinessModel(full.arch, **kw)
    else:
        model = models.build_classifier("torch", full.arch, num_classes=full.num_classes)
    model = model.to(device)
    untrained = predict.accuracy(model.eval(), val.x, val.y)
    steps = r["times"] * full.train_steps
    fit = training.train_classifier(
        model, train, steps=steps, batch_size=r["batch"], val=val, progress=False
    )
    need = bar(r["bar"], len(val), full.num_classes)
    tenths = [round(float(c.mean()), 3) for c in np.array_split(fit.losses, min(10, steps))]
    return dict(
        r, arch=full.arch, size=size, steps=steps, device=str(device),
        threads=torch.get_num_threads(), math_mode=fit.math_mode,
        untrained=untrained, val_accuracy=fit.val_accuracy, needed=need,
        learned=fit.val_accuracy > need, train_s=round(fit.seconds, 1),
        loss_by_tenth=tenths,
    )  # fmt: skip


def page(doc: dict[str, Any]) -> str:
    """``training_proxy.md``: what ran, and one row per recipe."""
    m = doc["machine"]
    lines = [
        "# Full mode's training recipes at full steps, smaller images (`tools/training_proxy.py`)",
        "",
        f"On {describe_machine(m)}, no GPU: each "
        "page's full-mode network, steps, batch, optimiser and initialisation, on the course's "
        "generated images at the size given instead of 224 px, and the page's assert. A proxy "
        "until a GPU runs `tests/gpu` (the same recipes at 224 px).",
        "",
        "| recipe | page | network | images | steps x batch | held out | needed | untrained "
        "| loss, first -> last tenth | learned |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in doc["recipes"].items():
        net = f"{r['arch']} ({r['net']}{', zero-init' if r['zero_init'] else ''})"
        loss = f"{r['loss_by_tenth'][0]:.2f} -> {r['loss_by_tenth'][-1]:.2f}"
        lines.append(
            f"| {name} | {r['page']} | {net} | {r['size']} px | {r['steps']} x {r['batch']} "
            f"| {r['val_accuracy']:.1%} | {r['needed']:.1%} | {r['untrained']:.1%} | {loss} "
            f"| {'yes' if r['learned'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="image size in pixels (default 64)")
    parser.add_argument("--only", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--json", type=Path, help="output file (default: beside make fullcpu's)")
    args = parser.parse_args(argv)
    from helpers.record import ledger

    out = args.json
    if out is None:  # beside make fullcpu's table (the slug ends in the current mode)
        slug = ledger.machine_slug(features=True).rsplit("-", 1)[0]
        out = ROOT / "results" / "reference" / f"{slug}-full-cpu" / "training_proxy.json"
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc["machine"] = machine_facts()
    doc["command"] = "python tools/training_proxy.py " + " ".join(argv or sys.argv[1:])
    recipes = doc.setdefault("recipes", {})
    for name in args.only:
        t0 = time.time()
        recipes[name] = run(name, args.size) | {"finished": time.strftime("%Y-%m-%dT%H:%MZ")}
        r = recipes[name]
        print(f"{name}: {r['val_accuracy']:.1%} held out (needs {r['needed']:.1%}; untrained "
              f"{r['untrained']:.1%}) after {r['steps']} steps, {time.time() - t0:.0f} s",
              flush=True)  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        out.with_suffix(".md").write_text(page(doc))
    controls = {"ch2-default"}  # expected to stay near chance: why chapter 2 zero-inits
    failed = [n for n in args.only if n not in controls and not recipes[n]["learned"]]
    print(f"written {out}" + (f"; did not learn: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
