"""Chapter 2's aligned training: one model trained in two frameworks, step for step.

The page writes the aligned loop itself first; :func:`train_aligned` runs the long versions and
returns a :class:`TrainingAlignment` (both loss curves, ``.plot()``, ``.assert_within(...)``).
The inference side a reader applies to their own port is :mod:`helpers.porting.alignment`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core.checks import check_int, check_number
from helpers.core.comparison import NAN_BOUND
from helpers.measure.timer import synchronize
from helpers.porting.alignment import as_float_batch
from helpers.show.table import ShowsAsTable, Table
from helpers.workload.data import batch_order
from helpers.workload.models import (
    framework_of,
    load_numpy_state,
    nn_namespace,
    state_dict_numpy,
)
from helpers.workload.predict import model_device, predict_classes

__all__ = ["make_train_step", "train_aligned"]


def _bound(label: str, value: Any, **limits: float) -> float:
    return check_number(label, value, why=NAN_BOUND, **limits)


OPTIMIZERS = ("sgd", "adam")


def make_train_step(
    model: Any,
    *,
    optimizer: str = "sgd",
    lr: float,
    momentum: float = 0.9,
    eps: float = 1e-8,
) -> Callable[[np.ndarray, np.ndarray], float]:
    """A cross-entropy training step for a torch or OneFlow model: ``step(x, y) -> loss``, with
    ``"sgd"`` (and ``momentum``) or ``"adam"`` (both frameworks' default betas and ``eps``)."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    for label, value in (("lr", lr), ("momentum", momentum), ("eps", eps)):
        _bound(label, value)
    if not lr > 0 or not 0 <= momentum < 1 or not eps > 0:
        raise ValueError(f"need lr > 0, 0 <= momentum < 1, eps > 0; got {lr}, {momentum}, {eps}")
    fw = framework_of(model)
    mod, _, F = nn_namespace(fw)
    device = model_device(model, fw)
    if optimizer == "sgd":
        opt = mod.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    else:
        opt = mod.optim.Adam(model.parameters(), lr=lr, eps=eps)
    model.train()

    as_tensor = mod.from_numpy if fw == "torch" else mod.tensor  # torch's shares the memory

    def step(x: np.ndarray, y: np.ndarray) -> float:
        loss = F.cross_entropy(model(as_tensor(x).to(device)), as_tensor(y).to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


@dataclass
class TrainingCurve:
    """One training run: loss per step, held-out accuracy and predictions at the end, wall time."""

    name: str
    losses: np.ndarray
    accuracy: float | None
    predictions: np.ndarray | None
    seconds: float
    # what must match for two curves to be comparable
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(repr=False)
class TrainingAlignment(ShowsAsTable):
    """Two training runs of the same model from the same start, compared step by step."""

    reference: TrainingCurve
    candidate: TrainingCurve
    batch_order: np.ndarray  # (steps, batch) sample indices both runs used

    @property
    def differences(self) -> np.ndarray:
        """Per-step loss difference, candidate - reference."""
        return self.candidate.losses - self.reference.losses

    def smoothed_differences(self, window: int = 10) -> np.ndarray:
        """Difference of the two loss curves' moving averages over ``window`` steps (what a plot
        shows): the moving average of the differences, the average being linear."""
        window = min(check_int("window", window), len(self.differences))
        return np.convolve(self.differences, np.ones(window) / window, "valid")

    @property
    def prediction_agreement(self) -> float | None:
        """Fraction of held-out samples on which both trained models predict the same class."""
        if self.reference.predictions is None or self.candidate.predictions is None:
            return None
        return float(np.mean(self.reference.predictions == self.candidate.predictions))

    def table(self) -> Table:
        """Both runs (first loss, mean of the last 10, held-out accuracy, seconds) and how far apart."""
        rows = [
            {"run": c.name, "first_loss": c.losses[0], "last_10_mean": float(c.losses[-10:].mean())}
            | {"val_accuracy": None if c.accuracy is None else f"{c.accuracy:.1%}"}
            | {"seconds": f"{c.seconds:.1f}"}
            for c in (self.reference, self.candidate)
        ]
        diff = np.abs(self.differences)
        notes = [
            f"per-step |loss difference|: step 1 {diff[0]:.2e}, "
            f"max {diff.max():.2e} (step {int(diff.argmax()) + 1})",
            f"10-step moving averages: largest gap {np.abs(self.smoothed_differences()).max():.2e}",
        ]
        agree = self.prediction_agreement
        if agree is not None:
            notes.append(f"held-out predictions of the two trained models agree on {agree:.1%}")
        return Table(rows, floatfmt=".4f", formats={"first_loss": ".6f"}, notes=notes)

    def plot(
        self,
        bound: float | None = None,
        floor: TrainingAlignment | None = None,
        title: str = "",
        window: int = 10,
    ) -> Any:
        """Both loss curves, |loss difference| per step (log scale) and the difference of the
        ``window``-step moving averages with ``bound`` (what :meth:`assert_within` checks).
        ``floor`` (e.g. a run against itself with weights nudged by 1e-6) is drawn beside for scale.
        """
        import matplotlib.pyplot as plt

        fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(11, 3.4))
        steps = np.arange(1, len(self.reference.losses) + 1)
        a1.plot(steps, self.reference.losses, lw=2.2, alpha=0.8, label=self.reference.name)
        a1.plot(steps, self.candidate.losses, lw=1.1, ls="--", label=self.candidate.name)
        a1.set(xlabel="step", ylabel="training loss")
        a1.set_title(title or "loss curves: same init, data order, optimizer", fontsize=9)
        a1.legend(fontsize=7)
        runs = [(self, "o-", "C0")] + ([(floor, "s-", "grey")] if floor is not None else [])
        for run, style, color in runs:
            d = np.maximum(np.abs(run.differences), 1e-9)
            name = f"{run.candidate.name} vs {run.reference.name}"
            a2.semilogy(np.arange(1, len(d) + 1), d, style, ms=2, lw=0.8, color=color, label=name)
            sm = np.abs(run.smoothed_differences(window))
            a3.plot(np.arange(window, window + len(sm)), sm, color=color)
        a2.set(xlabel="step", ylabel="|loss difference|")
        a2.set_title("per step (1e-9 = equal)", fontsize=9)
        a3.set(xlabel="step", ylabel="|difference of the means|")
        a3.set_title(f"moving averages over {window} steps", fontsize=9)
        a2.legend(fontsize=7)
        if bound is not None:
            a3.axhline(bound, color="C3", ls="--", lw=1, label=f"bound {bound:g}")
            a3.legend(fontsize=7)
        fig.tight_layout()
        return fig

    def shares(
        self,
        *,
        smoothed_bound: float,
        window: int = 10,
        first_step: float | None = None,
        max_accuracy_gap: float | None = None,
    ) -> dict[str, float]:
        """How much of each bound of :meth:`assert_within` the runs use (observed / bound; above 1
        fails): ``"first step"``, ``"moving averages"``, ``"accuracy gap"``, for the bounds given.
        A NaN or infinite bound raises ValueError (it would never be exceeded)."""
        for label, value in (("smoothed_bound", smoothed_bound), ("first_step", first_step)):
            if value is not None and _bound(label, value) <= 0:
                raise ValueError(f"bounds must be positive, got {label}={value!r}")
        out = {}
        if first_step is not None:
            out["first step"] = abs(float(self.differences[0])) / first_step
        sm = np.abs(self.smoothed_differences(window))
        out["moving averages"] = float(sm.max()) / smoothed_bound
        if max_accuracy_gap is not None:
            _bound("max_accuracy_gap", max_accuracy_gap, minimum=0.0, maximum=1.0)
            if self.reference.accuracy is None or self.candidate.accuracy is None:
                raise ValueError("accuracies were not measured (pass val= to train_aligned)")
            gap = abs(self.reference.accuracy - self.candidate.accuracy)
            zero = math.inf if gap > 0 else 0.0
            out["accuracy gap"] = gap / max_accuracy_gap if max_accuracy_gap > 0 else zero
        return out

    def assert_within(self, **bounds: Any) -> dict[str, float]:
        """Assert the runs agree within the bounds of :meth:`shares` (same keywords): the
        ``window``-step moving averages of the losses within ``smoothed_bound``; optionally the
        first step's losses within ``first_step`` and the held-out accuracies within
        ``max_accuracy_gap`` (a fraction). Returns :meth:`shares`."""
        try:
            used = self.shares(**bounds)
        except ValueError as err:  # a missing accuracy is a failed check, not a bad argument
            if "accuracies were not measured" in str(err):
                raise AssertionError(str(err)) from None
            raise
        window, first_step = bounds.get("window", 10), bounds.get("first_step")
        smoothed_bound, max_accuracy_gap = bounds["smoothed_bound"], bounds.get("max_accuracy_gap")
        problems = []
        if used.get("first step", 0.0) > 1:
            problems.append(
                f"the first step's losses differ by {abs(self.differences[0]):.3g} > {first_step:g}"
            )
        if used["moving averages"] > 1:
            sm = np.abs(self.smoothed_differences(window))
            problems.append(
                f"the {window}-step moving averages of the losses differ by {sm.max():.3g} "
                f"(window ending at step {int(sm.argmax()) + window}) > {smoothed_bound:g}"
            )
        if used.get("accuracy gap", 0.0) > 1:
            problems.append(
                f"held-out accuracies {self.reference.accuracy:.1%} and "
                f"{self.candidate.accuracy:.1%} differ by more than {max_accuracy_gap:.1%}"
            )
        if problems:
            raise AssertionError(
                f"training runs {self.reference.name!r} and {self.candidate.name!r} are not aligned: "
                + "; ".join(problems)
            )
        return used


def perturb_weights(model: Any, scale: float, seed: int = 0) -> None:
    """Multiply every floating-point weight by ``1 + scale * N(0, 1)`` (a float32-sized nudge for ``scale`` ~ 1e-6)."""
    if not _bound("scale", scale) > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    rng = np.random.default_rng(seed)
    state = state_dict_numpy(model)
    nudged = {
        k: (v * (1 + scale * rng.standard_normal(v.shape))).astype(v.dtype)
        if v.dtype.kind == "f"
        else v
        for k, v in state.items()
    }
    load_numpy_state(model, nudged)


def train_aligned(
    reference: Any,
    candidate: Any,
    x: np.ndarray,
    y: np.ndarray,
    *,
    steps: int,
    batch_size: int,
    optimizer: str = "sgd",
    lr: float = 0.05,
    seed: int = 0,
    val: tuple[np.ndarray, np.ndarray] | None = None,
    names: tuple[str, str] | None = None,
    perturb: float = 0.0,
    candidate_changes: Mapping[str, float] | None = None,
) -> TrainingAlignment:
    """Train ``reference`` and ``candidate`` identically and compare them step by step.

    The candidate must start from the reference's weights (``models.twin`` or
    ``transfer_weights`` copies and checks them); ``perturb`` nudges them by that relative
    amount (how chaotic training itself is). Both see the same batches in the same order with
    the same optimizer; dropout must be off (the frameworks draw different masks).
    ``val=(x, y)`` adds held-out accuracy. ``reference`` may be an earlier run's
    :class:`TrainingCurve` with the same data and settings, reused.

    ``candidate_changes`` plants a difference in the candidate's optimizer only (a bug on purpose,
    to see whether a check catches it): ``{"eps": 1e-6}``, ``{"lr": 1.2 * lr}``, ``momentum``.
    """
    x = as_float_batch(x)
    y = np.ascontiguousarray(np.asarray(y, dtype=np.int64))
    if len(x) != len(y):
        raise ValueError(f"{len(x)} inputs but {len(y)} labels")
    settings = dict(n=len(x), steps=steps, batch_size=batch_size, optimizer=optimizer, lr=lr)
    settings |= dict(seed=seed, val=None if val is None else len(val[1]))
    reuse = isinstance(reference, TrainingCurve)
    if reuse and reference.settings != settings:
        raise ValueError(f"the reference was trained with {reference.settings}, not {settings}")
    if names is None:
        names = (reference.name if reuse else framework_of(reference), framework_of(candidate))
    if names[0] == names[1]:
        raise ValueError(f"give the two runs different names, got {names}")
    if perturb:
        perturb_weights(candidate, perturb, seed=seed + 1)
    changes = dict(candidate_changes or {})
    unknown = sorted(set(changes) - set(_CHANGEABLE))
    if unknown:
        raise ValueError(
            f"candidate_changes may change {', '.join(_CHANGEABLE)}; got {', '.join(unknown)}"
        )
    order = batch_order(len(x), steps, batch_size, seed)

    def train(model: Any, name: str, **step_settings: Any) -> TrainingCurve:
        _check_no_dropout(model)
        step = make_train_step(model, **{"optimizer": optimizer, "lr": lr, **step_settings})
        fw, losses, seconds = framework_of(model), [], 0.0
        for idx in order:
            start = time.perf_counter()
            losses.append(step(x[idx], y[idx]))
            synchronize(fw)  # the loss is ready before the update is: wait for the whole step
            seconds += time.perf_counter() - start
        if not np.isfinite(losses).all():
            raise FloatingPointError(
                f"{name}: the loss became NaN or inf (lower the learning rate)"
            )
        pred = None if val is None else predict_classes(model, val[0])
        acc = None if val is None else float(np.mean(pred == np.asarray(val[1])))
        return TrainingCurve(name, np.array(losses), acc, pred, seconds, settings)

    if not reuse:
        reference = train(reference, names[0])
    cand_curve = train(candidate, names[1], **changes)
    return TrainingAlignment(dataclasses.replace(reference, name=names[0]), cand_curve, order)


_CHANGEABLE = ("lr", "momentum", "eps")


def _check_no_dropout(model: Any) -> None:
    for name, module in getattr(model, "named_modules", lambda: [])():
        if type(module).__name__.startswith("Dropout") and getattr(module, "p", 0) > 0:
            raise ValueError(
                f"module {name!r} is {type(module).__name__}(p={module.p}): the two frameworks would "
                "draw different dropout masks; build the model with dropout=0 for training alignment"
            )
