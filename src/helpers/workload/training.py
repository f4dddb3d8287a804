"""Train a PyTorch classifier on the generated dataset quickly, so accuracy means something:
:func:`train_classifier`, :func:`assert_above_chance`, and for your own model
:func:`train_until_above_chance` (more steps, BatchNorm statistics recomputed). Training two
frameworks *identically* (chapter 2): :mod:`helpers.chapters.ch02_alignment`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from helpers.core.checks import check_int, check_number

__all__ = [
    "above_chance_bar",
    "assert_above_chance",
    "train_classifier",
    "train_until_above_chance",
]


@dataclass
class TrainResult:
    """One training run: loss per step, wall time, where and in which math mode it ran
    (:func:`helpers.core.precision.torch_math_mode`), and held-out accuracy if asked."""

    losses: np.ndarray
    seconds: float
    batch_size: int
    val_accuracy: float | None = None
    device: str = "cpu"
    math_mode: str = "fp32"
    notes: tuple[str, ...] = ()  # what train_until_above_chance changed, one line each

    @property
    def steps(self) -> int:
        """Number of optimisation steps run."""
        return len(self.losses)

    @property
    def tail_loss(self) -> float:
        """The mean loss of the last 10% of the steps."""
        return float(self.losses[-max(1, self.steps // 10) :].mean())

    def __str__(self) -> str:
        acc = "" if self.val_accuracy is None else f", held-out accuracy {self.val_accuracy:.1%}"
        return (
            f"{self.steps} steps of batch {self.batch_size} in {self.seconds:.1f} s on "
            f"{self.device} ({self.math_mode}); "
            f"loss {self.losses[0]:.3f} -> {self.tail_loss:.3f} (mean of the last 10%){acc}"
            + "".join(f"\n  {note}" for note in self.notes)
        )


def augment_batch(x: np.ndarray, rng: np.random.Generator, max_shift: int) -> np.ndarray:
    """Random horizontal flips per image and one wrap-around shift (``np.roll``) per batch.

    Both keep the generated classes (no vertical flips: a triangle would point down).
    """
    out = x.copy()
    flip = rng.random(len(x)) < 0.5
    out[flip] = out[flip, :, :, ::-1]
    if max_shift:
        dy, dx = rng.integers(-max_shift, max_shift + 1, 2)
        out = np.roll(out, (int(dy), int(dx)), axis=(2, 3))
    return np.ascontiguousarray(out)


def train_classifier(
    model: Any,
    split: Any,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    val: Any = None,
    seed: int = 0,
    progress: bool = True,
) -> TrainResult:
    """Train a ``torch.nn.Module`` classifier on a :class:`helpers.workload.data.Split`.

    AdamW (peak ``lr``, one-cycle), cross-entropy, flips and shifts of up to 1/8 of the image; the
    model stays on its device, ends in eval mode; ``val`` adds held-out accuracy. NaN loss raises.
    """
    import torch

    from helpers.core.precision import torch_math_mode
    from helpers.workload.data import batch_order
    from helpers.workload.predict import accuracy

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"train_classifier trains a torch.nn.Module, got {type(model).__name__}")
    if not hasattr(split, "x") or not hasattr(split, "y"):
        raise TypeError(
            "split must have .x (inputs) and .y (labels), like helpers.workload.data.Split"
        )
    check_int("steps", steps)
    if not lr > 0:
        raise ValueError(f"need lr > 0, got {lr}")
    x = np.ascontiguousarray(split.x, dtype=np.float32)
    y = np.ascontiguousarray(split.y, dtype=np.int64)
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"need (n, c, h, w) inputs and n labels, got {x.shape} and {y.shape}")
    order = batch_order(len(x), steps, batch_size, seed)  # checks batch_size against the split
    device = next(model.parameters()).device
    math_mode = torch_math_mode(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25)
    from tqdm.auto import tqdm

    model.train()
    losses = []
    start = time.perf_counter()
    for idx in tqdm(order, desc="training", leave=False, disable=not progress):
        xb = augment_batch(x[idx], rng, x.shape[-1] // 8)
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(xb).to(device)), torch.from_numpy(y[idx]).to(device)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        value = float(loss.item())
        if not np.isfinite(value):
            model.eval()
            raise FloatingPointError(
                f"the loss became {value} at step {len(losses) + 1}: lower the learning rate"
            )
        losses.append(value)
    seconds = time.perf_counter() - start
    model.eval()
    val_acc = accuracy(model, val.x, val.y) if val is not None else None
    return TrainResult(np.array(losses), seconds, batch_size, val_acc, str(device), math_mode)


def assert_above_chance(accuracy: float, samples: int, classes: int, name: str = "model") -> str:
    """Assert ``accuracy`` on ``samples`` held-out samples beats :func:`above_chance_bar`.

    A guesser beats the bar (chance + 3 SE) about once in a thousand runs; a check on a model
    that learned nothing proves nothing (its near-tie decisions swap under any rounding).
    Returns one printable line naming the bar (``the bar 15.6%``).
    """
    accuracy = check_number("accuracy", accuracy, minimum=0.0, maximum=1.0, why="a fraction")
    need, chance = above_chance_bar(samples, classes), 1.0 / classes
    line = (
        f"{name}: held-out accuracy {accuracy:.1%} {{}} the bar {need:.1%}"
        f" (chance {chance:.1%} + 3 SE on {samples} images)"
    )
    if not accuracy > need:
        raise AssertionError(
            line.format("<=") + ": it learned too little for a check "
            "(training.chance_advice(model, fit, val, classes) says what to change)"
        )
    return line.format(">")


def batch_stats_accuracy(model: Any, x: Any, y: Any, batch_size: int = 64) -> float:
    """Top-1 accuracy of a copy of ``model`` whose BatchNorms (only) run in train mode.

    Far above the eval-mode accuracy, it says the running statistics lag behind the weights.
    """
    import copy

    import torch

    from helpers.workload.predict import accuracy

    probe = copy.deepcopy(model).eval()
    for m in probe.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.train()
    device = next(probe.parameters()).device
    with torch.no_grad():  # a function, not a module: predict leaves its modes alone
        return accuracy(lambda xb: probe(torch.from_numpy(xb).to(device)), x, y, batch_size)


def chance_advice(model: Any, fit: TrainResult, val: Any, classes: int) -> str:
    """What to change when ``model`` (trained as ``fit`` says) stays at chance on ``val``
    (empty when it is above the bar): recompute lagging BatchNorm statistics, or train longer."""
    from helpers.workload import models

    bar = above_chance_bar(len(val.y), classes)
    if fit.val_accuracy is not None and fit.val_accuracy > bar:
        return ""
    batch_stats = batch_stats_accuracy(model, val.x, val.y)
    if batch_stats > bar:
        momentum = models.batchnorm_momentum(model)
        lag = f" (momentum {momentum:g})" if momentum is not None else ""
        return (
            f"with each batch's own statistics it scores {batch_stats:.1%}: its BatchNorm "
            f"running statistics{lag} lag behind its weights; recompute them with "
            "models.calibrate_batchnorm(model, train.x, batch_size=64)"
        )
    return (
        f"its loss went {fit.losses[0]:.3f} -> {fit.tail_loss:.3f} in {fit.steps} steps and each "
        f"batch's own statistics give {batch_stats:.1%}: train longer (steps={2 * fit.steps} "
        "or more; for a ResNet, build it with zero_init_residual=True)"
    )


def train_until_above_chance(
    model: Any,
    train: Any,
    val: Any,
    *,
    steps: int,
    classes: int,
    **kw: Any,
) -> TrainResult:
    """Train ``model`` (your own, untuned) in up to 5 rounds of ``steps`` until it beats the bar.

    After a round below the bar, BatchNorm statistics that lag (each batch's own decide) are
    recomputed, else another round runs; then it raises with :func:`chance_advice`. The result
    sums the rounds and its ``notes`` say what was done. The course's models pass in round one.
    """
    from helpers.workload import models
    from helpers.workload.predict import accuracy

    bar = above_chance_bar(len(val.y), classes)
    losses: list[np.ndarray] = []
    notes: list[str] = []
    seconds = 0.0
    for r in range(5):
        fit = train_classifier(model, train, steps=steps, val=val, seed=r, **kw)
        losses.append(fit.losses)
        seconds += fit.seconds
        done = f"after {sum(map(len, losses))} steps: held-out {fit.val_accuracy:.1%}"
        if fit.val_accuracy > bar:
            break
        if batch_stats_accuracy(model, val.x, val.y) > bar:  # the statistics lag
            models.calibrate_batchnorm(model, train.x, batch_size=64)
            fit = replace(fit, val_accuracy=accuracy(model, val.x, val.y))
            notes.append(
                f"{done}; BatchNorm statistics recomputed (they lagged): {fit.val_accuracy:.1%}"
            )
            if fit.val_accuracy > bar:
                break
        elif r < 4:
            notes.append(f"{done} <= the bar {bar:.1%}: {steps} more steps")
    fit = replace(fit, losses=np.concatenate(losses), seconds=seconds, notes=tuple(notes))
    if not fit.val_accuracy > bar:
        advice = chance_advice(model, fit, val, classes)
        raise AssertionError(
            f"model: held-out accuracy {fit.val_accuracy:.1%} <= the bar {bar:.1%} after "
            f"{fit.steps} steps in {len(losses)} rounds: {advice}"
        )
    return fit


# ---- saved from notebooks/02_precision_alignment.ipynb by tools/save_cells.py: edit it there ----
def above_chance_bar(samples: int, classes: int) -> float:
    """Held-out accuracy to beat: chance plus three standard errors of a guesser."""
    if samples < 1 or classes < 2:
        raise ValueError(f"need samples >= 1, classes >= 2; got {samples}, {classes}")
    chance = 1.0 / classes  # a guesser's mean score, with a standard error of:
    return chance + 3.0 * (chance * (1.0 - chance) / samples) ** 0.5


# ---- end of cells saved from notebooks/02_precision_alignment.ipynb ----
