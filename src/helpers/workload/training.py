"""Train a PyTorch classifier on the generated dataset quickly, so accuracy means something.

    result = train_classifier(model, train_split, steps=300, batch_size=64, val=val_split)
    print(result)                  # steps, seconds, device and math mode, final loss, accuracy

    print(assert_above_chance(result.val_accuracy, len(val_split), 8, "resnet18"))

    # your own model: train until it decides (more steps, BatchNorm statistics recomputed)
    result = train_until_above_chance(model, train_split, val_split, steps=60, classes=8)

For training two frameworks *identically* (chapter 2), see :mod:`helpers.chapters.ch02_alignment`.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = [
    "above_chance_bar",
    "assert_above_chance",
    "train_classifier",
    "train_until_above_chance",
]


@dataclass
class TrainResult:
    """One training run: loss per step, wall time, where it ran and (optionally) held-out accuracy.

    ``device`` and ``math_mode`` (:func:`helpers.core.precision.torch_math_mode` during training:
    TF32 convolutions by default on an Ampere-or-newer GPU) say what a recorded time measured.
    """

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

    def __str__(self) -> str:
        tail = self.losses[-max(1, self.steps // 10) :].mean()
        acc = (
            f", held-out accuracy {self.val_accuracy:.1%}" if self.val_accuracy is not None else ""
        )
        return (
            f"{self.steps} steps of batch {self.batch_size} in {self.seconds:.1f} s on "
            f"{self.device} ({self.math_mode}); "
            f"loss {self.losses[0]:.3f} -> {tail:.3f} (mean of the last 10%){acc}"
            + "".join(f"\n  {note}" for note in self.notes)
        )


def augment_batch(x: np.ndarray, rng: np.random.Generator, max_shift: int) -> np.ndarray:
    """Random horizontal flips (per image) and one random translation of up to ``max_shift`` pixels (per batch).

    Translation wraps around (``np.roll``), which on the generated images just moves the pattern.
    The generated classes are unchanged by both (no vertical flips: a triangle would point down).
    """
    if x.ndim != 4:
        raise ValueError(f"expected an (n, c, h, w) batch, got shape {x.shape}")
    if max_shift < 0:
        raise ValueError(f"max_shift must be >= 0, got {max_shift}")
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
    weight_decay: float = 1e-4,
    augment: bool = True,
    val: Any = None,
    seed: int = 0,
    progress: bool = True,
) -> TrainResult:
    """Train a ``torch.nn.Module`` classifier on ``split`` (a :class:`helpers.workload.data.Split`) for ``steps`` steps.

    AdamW (peak ``lr``) with a one-cycle schedule, cross-entropy loss, and (with ``augment``) flips and
    shifts of up to 1/8 of the image. The model stays on its device and ends in eval mode. ``val``
    (another Split) adds the held-out accuracy to the result. Raises on a NaN/inf loss.
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
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if lr <= 0 or weight_decay < 0:
        raise ValueError(f"need lr > 0 and weight_decay >= 0, got {lr} and {weight_decay}")
    x = np.ascontiguousarray(split.x, dtype=np.float32)
    y = np.ascontiguousarray(split.y, dtype=np.int64)
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(f"need (n, c, h, w) inputs and n labels, got {x.shape} and {y.shape}")
    order = batch_order(
        len(x), steps, batch_size, seed
    )  # validates batch_size against the split size
    device = next(model.parameters()).device
    math_mode = torch_math_mode(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25)
    loop: Any = order
    if progress:
        from tqdm.auto import tqdm

        loop = tqdm(order, desc="training", leave=False)
    model.train()
    losses = []
    start = time.perf_counter()
    for idx in loop:
        xb = augment_batch(x[idx], rng, x.shape[-1] // 8) if augment else x[idx]
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
    return TrainResult(
        losses=np.array(losses),
        seconds=seconds,
        batch_size=batch_size,
        val_accuracy=val_acc,
        device=str(device),
        math_mode=math_mode,
    )


def assert_above_chance(accuracy: float, samples: int, classes: int, name: str = "model") -> str:
    """Assert ``accuracy`` on ``samples`` held-out samples beats guessing among ``classes``.

    Guessing scores ``1 / classes`` on average, with a standard error (SE) of
    ``sqrt(p (1 - p) / samples)``; the model must beat it by three standard errors (a guesser
    does so about once in a thousand runs). A check on a model that learned nothing proves
    nothing: its decisions are near-ties that any rounding can swap. Returns one printable
    line, which names the bar (``the bar 15.6%``).
    """
    if isinstance(accuracy, bool) or not isinstance(accuracy, numbers.Real):
        raise ValueError(f"accuracy must be a fraction in [0, 1], got {accuracy!r}")
    if not 0.0 <= accuracy <= 1.0:  # NaN fails this too
        raise ValueError(f"accuracy must be a fraction in [0, 1], got {accuracy!r}")
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
    """Top-1 accuracy with every BatchNorm normalising by its batch's own statistics.

    A copy of ``model`` runs with its BatchNorm layers in train mode (everything else, dropout
    included, in eval mode, gradients off), so its running statistics play no part. Far above
    the eval-mode accuracy, it says those running statistics lag behind the weights.
    """
    import copy

    import torch

    y = np.asarray(y)
    probe = copy.deepcopy(model).eval()
    for m in probe.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.train()
    device = next(probe.parameters()).device
    hits = 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            xb = torch.as_tensor(np.ascontiguousarray(x[i : i + batch_size])).to(device)
            hits += int((probe(xb).argmax(1).cpu().numpy() == y[i : i + batch_size]).sum())
    return hits / len(y)


def chance_advice(model: Any, fit: TrainResult, val: Any, classes: int) -> str:
    """What to change when ``model`` (trained as ``fit`` says) stays at chance on ``val``.

    With each batch's own BatchNorm statistics above the bar: recompute the running statistics
    (:func:`helpers.workload.models.precise_batchnorm`). Otherwise: train longer (and, for a
    ResNet, start its residual branches at zero). Empty when the model is above the bar.
    """
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
            "models.precise_batchnorm(model, train.x)"
        )
    tail = fit.losses[-max(1, fit.steps // 10) :].mean()
    return (
        f"its loss went {fit.losses[0]:.3f} -> {tail:.3f} in {fit.steps} steps and each "
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
    max_rounds: int = 5,
    name: str = "model",
    **kw: Any,
) -> TrainResult:
    """Train ``model`` in rounds of ``steps`` until it beats the above-chance bar on ``val``.

    For a model the course has not tuned a recipe for (your own): after each round of
    :func:`train_classifier`, when the held-out accuracy is not above the bar, the BatchNorm
    running statistics are recomputed if they lag (:func:`chance_advice`), else another round is
    trained, up to ``max_rounds``; then it raises with the advice. The result sums the rounds
    (their losses, seconds) and its ``notes`` say what was done. The course's own models pass in
    the first round, unchanged.
    """
    from helpers.workload import models
    from helpers.workload.predict import accuracy

    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive int, got {max_rounds!r}")
    bar = above_chance_bar(len(val.y), classes)
    losses: list[np.ndarray] = []
    notes: list[str] = []
    seconds = 0.0
    fit: TrainResult | None = None
    for r in range(max_rounds):
        fit = train_classifier(model, train, steps=steps, val=val, seed=r, **kw)
        losses.append(fit.losses)
        seconds += fit.seconds
        if fit.val_accuracy is not None and fit.val_accuracy > bar:
            break
        advice = chance_advice(model, fit, val, classes)
        if "BatchNorm" in advice:
            models.precise_batchnorm(model, train.x)
            after = accuracy(model, val.x, val.y)
            notes.append(
                f"after {sum(map(len, losses))} steps: held-out {fit.val_accuracy:.1%}; "
                f"BatchNorm statistics recomputed (they lagged): {after:.1%}"
            )
            fit = replace(fit, val_accuracy=after)
            if after > bar:
                break
        elif r + 1 < max_rounds:
            notes.append(
                f"after {sum(map(len, losses))} steps: held-out {fit.val_accuracy:.1%} <= the "
                f"bar {bar:.1%}: {steps} more steps"
            )
    assert fit is not None
    fit = replace(fit, losses=np.concatenate(losses), seconds=seconds, notes=tuple(notes))
    if not (fit.val_accuracy is not None and fit.val_accuracy > bar):
        advice = chance_advice(model, fit, val, classes)
        raise AssertionError(
            f"{name}: held-out accuracy {fit.val_accuracy:.1%} <= the bar {bar:.1%} after "
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
