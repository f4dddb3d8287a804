"""Precision alignment of two implementations of one model (PyTorch vs OneFlow, eager vs graph, ...).

- :func:`alignment_report` -- one call: run a reference and one or more candidates on the same
  inputs and get an :class:`AlignmentReport` (``.table()``, ``.plot()``, ``.assert_close(...)``):
  max/mean/p99 absolute error, max relative error, cosine similarity and top-k agreement, and
  the distribution of the element-wise errors;
- :func:`train_aligned` -- train the same model in two frameworks (or two execution modes) with
  identical initial weights, data order, optimizer and hyper-parameters; returns a
  :class:`TrainingAlignment` with both loss curves, their per-step difference, final accuracies,
  ``.plot()`` and ``.assert_within(...)``;
- :func:`train_run`, :func:`make_train_step`, :func:`perturb_weights` -- its parts: one run over
  a fixed batch order (:func:`helpers.workload.data.batch_order`), the eager (or OneFlow
  ``nn.Graph``) SGD/Adam step and a float32-sized nudge of the weights (to measure how chaotic
  training itself is). Chapter 2 writes the aligned loop itself on its page first; these run the
  long versions. Held-out accuracy and batch-wise prediction come from
  :mod:`helpers.workload.predict`, the course's one source for them;
- a model must beat guessing before its agreement with another means anything:
  :func:`helpers.workload.training.assert_above_chance`.

Models may be torch or OneFlow modules, OneFlow ``nn.Graph`` objects, TorchScript or compiled
modules; plain Python callables receive NumPy arrays and must return an array or a tensor.
Inputs are float batches (first axis = samples); they are fed to every model as float32, or as
float64 to a float64 model (a float64 copy makes a good "exact" reference).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core.checks import check_number
from helpers.core.comparison import Comparison, compare, to_numpy
from helpers.measure.timer import synchronize
from helpers.show.table import Table
from helpers.workload.data import batch_order
from helpers.workload.models import (
    framework_of,
    load_numpy_state,
    nn_namespace,
    state_dict_numpy,
    transfer_weights,
)
from helpers.workload.predict import model_device, predict_batched, predict_classes

__all__ = [
    "alignment_report",
    "make_train_step",
    "train_aligned",
]

# ----------------------------------------------------------------------------- inference alignment


def _check_number(label: str, value: Any) -> float:
    """``value`` as a float; every bound here is used as ``error > bound``, so NaN or inf is refused."""
    return check_number(label, value, why="a NaN or infinite bound would let any values pass")


def _check_fraction(label: str, value: Any) -> float:
    value = _check_number(label, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{label} must be a fraction in [0, 1], got {value!r}")
    return value


def _as_inputs(inputs: Any) -> np.ndarray:
    arr = inputs if isinstance(inputs, np.ndarray) else to_numpy(inputs)
    if arr.ndim < 1 or len(arr) == 0:
        raise ValueError(
            f"inputs must be a non-empty batch (first axis = samples), got shape {arr.shape}"
        )
    return np.ascontiguousarray(arr, dtype=np.float32)


@dataclass
class AlignmentRow:
    """One candidate compared with the reference."""

    name: str
    comparison: Comparison
    abs_errors: np.ndarray  # flattened |candidate - reference|
    reference_scale: float  # max |reference|, to read absolute errors against


@dataclass
class AlignmentReport:
    """How far each candidate's outputs are from the reference's on the same inputs."""

    reference_name: str
    samples: int
    rows: list[AlignmentRow] = field(default_factory=list)

    def __getitem__(self, name: str) -> AlignmentRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no candidate named {name!r}; have {', '.join(r.name for r in self.rows)}")

    def table_rows(self) -> list[dict[str, Any]]:
        out = []
        for r in self.rows:
            c = r.comparison
            row: dict[str, Any] = {
                "candidate": r.name,
                "max_abs": c.max_abs,
                "mean_abs": c.mean_abs,
                "max_rel": c.max_rel,
                "cosine": f"{c.cosine:.9f}",
            }
            for k, v in c.topk.items():
                row[f"top{k}_agree"] = f"{v:.0%}"
            out.append(row)
        return out

    def table(self) -> Table:
        """One row per candidate: errors against the reference, cosine, top-k agreement."""
        return Table(
            self.table_rows(),
            title=f"against {self.reference_name}, {self.samples} samples; largest "
            f"|{self.reference_name} output| {self.rows[0].reference_scale:.3g}",
            floatfmt=".2e",
        )

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:  # what a notebook shows as text: the table, not every error
        return str(self)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def plot(self, ax: Any = None, title: str = "") -> Any:
        """Histogram of log10 |candidate - reference| per element, one colour per candidate; exact zeros are counted in the legend."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(7, 3.5))[1]
        floor = 1e-12
        for i, r in enumerate(self.rows):
            nz = r.abs_errors[r.abs_errors > 0]
            zeros = r.abs_errors.size - nz.size
            label = (
                f"{r.name} (max {r.comparison.max_abs:.1e}"
                + (f", {zeros} exactly equal" if zeros else "")
                + ")"
            )
            if nz.size:
                ax.hist(
                    np.log10(np.maximum(nz, floor)), bins=40, alpha=0.55, color=f"C{i}", label=label
                )
            else:
                ax.axvline(np.log10(floor), color=f"C{i}", label=label)
        eps = np.finfo(np.float32).eps * self.rows[0].reference_scale
        ax.axvline(np.log10(eps), color="grey", ls="--", lw=1, label="float32 eps x max|output|")
        ax.set_xlabel(f"log10 |candidate - {self.reference_name}| per output element")
        ax.set_ylabel("elements")
        ax.set_title(title or f"error distribution against {self.reference_name}")
        ax.legend(fontsize=8)
        return ax

    def _checked_rows(self, names: Sequence[str] | str | None) -> list[AlignmentRow]:
        """The rows ``names`` selects (all rows for ``None``); ``ValueError`` for unknown names."""
        if names is None:
            return list(self.rows)
        wanted = [names] if isinstance(names, str) else list(names)
        known = [r.name for r in self.rows]
        if not wanted:
            raise ValueError(f"names is empty: nothing would be checked; candidates: {known}")
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise ValueError(
                f"names {unknown} are not candidates of this report (a typo?); "
                f"its candidates are {known}"
            )
        return [r for r in self.rows if r.name in wanted]

    def assert_close(
        self,
        *,
        atol: float,
        rtol: float = 0.0,
        min_cosine: float | None = None,
        min_topk: Mapping[int, float] | None = None,
        names: Sequence[str] | str | None = None,
    ) -> None:
        """Assert every candidate (or those in ``names``) is within ``atol + rtol * max|reference|`` everywhere
        (``rtol`` scales with the largest reference output), and within the cosine and top-k bounds.

        Bounds must be finite numbers (``ValueError`` otherwise); ``names`` (a list of candidate
        names, or one name) must name candidates of this report: a misspelt name raises
        ``ValueError`` rather than silently checking nothing.
        """
        if _check_number("atol", atol) < 0 or _check_number("rtol", rtol) < 0:
            raise ValueError(f"tolerances must be non-negative, got atol={atol!r}, rtol={rtol!r}")
        if min_cosine is not None and not -1.0 <= _check_number("min_cosine", min_cosine) <= 1.0:
            raise ValueError(f"min_cosine must lie in [-1, 1], got {min_cosine!r}")
        for k, need in (min_topk or {}).items():
            if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
                raise ValueError(f"min_topk keys must be positive ints (the k of top-k), got {k!r}")
            _check_fraction(f"min_topk[{k}]", need)
        checked = self._checked_rows(names)
        problems = []
        for r in checked:
            c = r.comparison
            if c.max_abs > atol + rtol * r.reference_scale:
                problems.append(
                    f"{r.name}: max abs error {c.max_abs:.3g} exceeds atol={atol:g} + rtol={rtol:g}*max|ref|"
                )
            if min_cosine is not None and c.cosine < min_cosine:
                problems.append(f"{r.name}: cosine {c.cosine:.9f} below {min_cosine}")
            for k, need in (min_topk or {}).items():
                if k not in c.topk:
                    problems.append(
                        f"{r.name}: top-{k} agreement was not measured (outputs have fewer classes?)"
                    )
                elif c.topk[k] < need:
                    problems.append(f"{r.name}: top-{k} agreement {c.topk[k]:.1%} below {need:.1%}")
        if problems:
            raise AssertionError(f"not aligned with {self.reference_name}: " + "; ".join(problems))


def alignment_report(
    reference: Any,
    candidates: Any,
    inputs: Any,
    *,
    reference_name: str = "reference",
    topk: Sequence[int] = (1,),
    batch_size: int | None = None,
) -> AlignmentReport:
    """Run ``reference`` and each candidate on the same ``inputs`` and compare their outputs.

    ``candidates`` is one model or a ``{name: model}`` mapping. ``inputs`` is a NumPy array or
    tensor whose first axis is samples; it is fed ``batch_size`` samples at a time (default:
    all at once; a OneFlow graph needs the batch size it was compiled for). Top-k agreement is
    computed for 2-D (samples, classes) outputs, for each ``k`` up to the number of classes;
    the default is top-1 only: top-5 says little unless there are many more than 5 classes
    (top-5 of 8 classes agrees even between unrelated models most of the time).
    Raises ``ValueError`` naming both shapes when a candidate's output shape differs.
    """
    if not isinstance(candidates, Mapping):
        candidates = {"candidate": candidates}
    if not candidates:
        raise ValueError("give at least one candidate to compare with the reference")
    x = _as_inputs(inputs)
    ref = predict_batched(reference, x, batch_size)
    report = AlignmentReport(reference_name, len(x))
    for name, model in candidates.items():
        out = predict_batched(model, x, batch_size)
        if out.shape != ref.shape:
            raise ValueError(
                f"outputs differ in shape: {reference_name} gives {ref.shape}, {name} gives {out.shape}; "
                "the two models do not compute the same thing (check the head, num_classes and input size)"
            )
        ks = tuple(k for k in topk if ref.ndim == 2 and k <= ref.shape[1])
        cmp = compare(out, ref, topk=ks)
        report.rows.append(
            AlignmentRow(name, cmp, np.abs(out - ref).ravel(), float(np.abs(ref).max()))
        )
    return report


# ----------------------------------------------------------------------------- training alignment

OPTIMIZERS = ("sgd", "adam")


def make_train_step(
    model: Any,
    *,
    optimizer: str = "sgd",
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
    use_graph: bool = False,
) -> Callable[[np.ndarray, np.ndarray], float]:
    """A cross-entropy training step for a torch or OneFlow model: ``step(x, y) -> loss`` (NumPy in, float out).

    ``optimizer`` is ``"sgd"`` (with ``momentum``) or ``"adam"`` (default betas, ``eps`` 1e-8 as
    in both frameworks' defaults). ``use_graph`` runs the OneFlow step as an ``nn.Graph`` (forward, backward
    and update compiled together, see :func:`helpers.compiling.graphs.make_train_graph`).
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    for label, value in (
        ("lr", lr),
        ("momentum", momentum),
        ("weight_decay", weight_decay),
        ("eps", eps),
    ):
        _check_number(label, value)
    if not lr > 0 or not 0 <= momentum < 1 or weight_decay < 0 or not eps > 0:
        raise ValueError(
            f"need lr > 0, 0 <= momentum < 1, weight_decay >= 0, eps > 0; got {lr}, {momentum}, "
            f"{weight_decay}, {eps}"
        )
    fw = framework_of(model)
    if use_graph and fw != "oneflow":
        raise ValueError(
            "use_graph=True needs a OneFlow model (nn.Graph is OneFlow's static graph)"
        )
    mod, nn, F = nn_namespace(fw)
    device = model_device(model, fw)
    if optimizer == "sgd":
        opt = mod.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        opt = mod.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, eps=eps)
    model.train()

    def tensors(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        if fw == "torch":
            return mod.from_numpy(x).to(device), mod.from_numpy(y).to(device)
        return mod.tensor(x).to(device), mod.tensor(y).to(device)

    if use_graph:
        from helpers.compiling.graphs import make_train_graph

        graph = make_train_graph(model, opt, nn.CrossEntropyLoss())

        def graph_step(x: np.ndarray, y: np.ndarray) -> float:
            return float(graph(*tensors(x, y)).numpy())

        return graph_step

    def step(x: np.ndarray, y: np.ndarray) -> float:
        xt, yt = tensors(x, y)
        loss = F.cross_entropy(model(xt), yt)
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
    settings: dict[str, Any] = field(
        default_factory=dict
    )  # what must match for two curves to be comparable


@dataclass
class TrainingAlignment:
    """Two training runs of the same model from the same start, compared step by step."""

    reference: TrainingCurve
    candidate: TrainingCurve
    batch_order: np.ndarray  # (steps, batch) sample indices both runs used

    @property
    def differences(self) -> np.ndarray:
        """Per-step loss difference, candidate - reference."""
        return self.candidate.losses - self.reference.losses

    def smoothed_differences(self, window: int = 10) -> np.ndarray:
        """Difference of the two loss curves after a moving average over ``window`` steps (what a plot shows)."""
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        window = min(window, len(self.differences))
        kernel = np.ones(window) / window
        return np.convolve(self.candidate.losses, kernel, "valid") - np.convolve(
            self.reference.losses, kernel, "valid"
        )

    @property
    def prediction_agreement(self) -> float | None:
        """Fraction of held-out samples on which both trained models predict the same class."""
        if self.reference.predictions is None or self.candidate.predictions is None:
            return None
        return float(np.mean(self.reference.predictions == self.candidate.predictions))

    def table(self) -> Table:
        """Both runs (first loss, mean of the last 10, held-out accuracy, seconds) and how far apart."""
        rows = []
        for c in (self.reference, self.candidate):
            rows.append(
                {
                    "run": c.name,
                    "first_loss": c.losses[0],
                    "last_10_mean": float(c.losses[-10:].mean()),
                    "val_accuracy": None if c.accuracy is None else f"{c.accuracy:.1%}",
                    "seconds": f"{c.seconds:.1f}",
                }
            )
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

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:  # what a notebook shows as text: the table, not every error
        return str(self)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def plot(
        self,
        bound: float | None = None,
        floor: TrainingAlignment | None = None,
        title: str = "",
        window: int | None = None,
    ) -> Any:
        """Both loss curves on one chart, and |loss difference| per step (log scale).

        ``floor`` (another :class:`TrainingAlignment`, e.g. a run against itself with weights nudged
        by 1e-6) is drawn beside the differences for scale. With ``window``, a third panel shows
        the difference of the ``window``-step moving averages, with ``bound`` (what
        :meth:`assert_within` checks); without it, ``bound`` is drawn on the per-step panel.
        """
        import matplotlib.pyplot as plt

        panels = 3 if window else 2
        fig, axes = plt.subplots(1, panels, figsize=(11, 3.4))
        a1, a2 = axes[0], axes[1]
        steps = np.arange(1, len(self.reference.losses) + 1)
        a1.plot(steps, self.reference.losses, lw=2.2, alpha=0.8, label=self.reference.name)
        a1.plot(steps, self.candidate.losses, lw=1.1, ls="--", label=self.candidate.name)
        a1.set_xlabel("step")
        a1.set_ylabel("training loss")
        a1.set_title(title or "loss curves: same init, data order, optimizer", fontsize=9)
        a1.legend(fontsize=7)
        runs = [(self, "o-", f"C{0}")] + ([(floor, "s-", "grey")] if floor is not None else [])
        for run, style, color in runs:
            a2.semilogy(
                np.arange(1, len(run.differences) + 1),
                np.maximum(np.abs(run.differences), 1e-9),
                style,
                ms=2,
                lw=0.8,
                color=color,
                label=f"{run.candidate.name} vs {run.reference.name}",
            )
        a2.set_xlabel("step")
        a2.set_ylabel("|loss difference|")
        a2.set_title("per step (1e-9 = equal)", fontsize=9)
        target = a2
        if window:
            a3 = axes[2]
            for run, _, color in runs:
                sm = np.abs(run.smoothed_differences(window))
                a3.plot(np.arange(window, window + len(sm)), sm, color=color)
            a3.set_xlabel("step")
            a3.set_ylabel("|difference of the means|")
            a3.set_title(f"moving averages over {window} steps", fontsize=9)
            target = a3
        if bound is not None:
            target.axhline(bound, color="C3", ls="--", lw=1, label=f"bound {bound:g}")
        for ax in axes[1:]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
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
        """How much of each bound of :meth:`assert_within` the two runs use: observed / bound.

        Keys ``"first step"``, ``"moving averages"``, ``"accuracy gap"`` (those bounds given);
        a value above 1 fails. Bounds must be finite numbers (``ValueError`` otherwise: a NaN
        bound would never be exceeded); an accuracy gap needs both accuracies.
        """
        bounds = {"smoothed_bound": smoothed_bound}
        if first_step is not None:
            bounds["first_step"] = first_step
        for label, value in bounds.items():
            if _check_number(label, value) <= 0:
                raise ValueError(f"bounds must be positive, got {label}={value!r}")
        out = {}
        if first_step is not None:
            out["first step"] = abs(float(self.differences[0])) / first_step
        out["moving averages"] = float(np.abs(self.smoothed_differences(window)).max()) / (
            smoothed_bound
        )
        if max_accuracy_gap is not None:
            _check_fraction("max_accuracy_gap", max_accuracy_gap)
            if self.reference.accuracy is None or self.candidate.accuracy is None:
                raise ValueError("accuracies were not measured (pass val= to train_aligned)")
            gap = abs(self.reference.accuracy - self.candidate.accuracy)
            if max_accuracy_gap > 0:
                out["accuracy gap"] = gap / max_accuracy_gap
            else:
                out["accuracy gap"] = math.inf if gap > 0 else 0.0
        return out

    def assert_within(
        self,
        *,
        smoothed_bound: float,
        window: int = 10,
        first_step: float | None = None,
        max_accuracy_gap: float | None = None,
    ) -> dict[str, float]:
        """Assert the runs agree: the ``window``-step moving averages of the two loss curves within
        ``smoothed_bound`` everywhere; optionally the first step's losses within ``first_step`` and the
        final held-out accuracies within ``max_accuracy_gap`` (a fraction). Bounds must be finite
        numbers (``ValueError`` otherwise: a NaN bound would never be exceeded). Returns
        :meth:`shares` (how much of each bound was used)."""
        if max_accuracy_gap is not None:
            _check_fraction("max_accuracy_gap", max_accuracy_gap)
            if self.reference.accuracy is None or self.candidate.accuracy is None:
                raise AssertionError("accuracies were not measured (pass val= to train_aligned)")
        used = self.shares(
            smoothed_bound=smoothed_bound,
            window=window,
            first_step=first_step,
            max_accuracy_gap=max_accuracy_gap,
        )
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


def _weights(model: Any) -> dict[str, np.ndarray]:
    return {
        k: v for k, v in state_dict_numpy(model).items() if not k.endswith("num_batches_tracked")
    }


def perturb_weights(model: Any, scale: float, seed: int = 0) -> None:
    """Multiply every floating-point weight by ``1 + scale * N(0, 1)`` (a float32-sized nudge for ``scale`` ~ 1e-6)."""
    if not _check_number("scale", scale) > 0:
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


def train_run(
    model: Any,
    x: np.ndarray,
    y: np.ndarray,
    order: np.ndarray,
    *,
    name: str,
    optimizer: str = "sgd",
    lr: float = 0.05,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-8,
    val: tuple[np.ndarray, np.ndarray] | None = None,
    use_graph: bool = False,
    progress: bool = True,
) -> TrainingCurve:
    """Train ``model`` on the batches ``x[order[i]], y[order[i]]`` and return its :class:`TrainingCurve`."""
    _check_no_dropout(model)
    step = make_train_step(
        model,
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        eps=eps,
        use_graph=use_graph,
    )
    fw = framework_of(model)
    loop: Any = order
    if progress:
        from tqdm.auto import tqdm

        loop = tqdm(order, desc=f"training ({name})", leave=False)
    losses, seconds = [], 0.0
    for idx in loop:
        start = time.perf_counter()
        losses.append(step(x[idx], y[idx]))
        synchronize(fw)  # the loss is ready before the update is: wait for the whole step
        seconds += time.perf_counter() - start
    losses_arr = np.array(losses)
    if not np.isfinite(losses_arr).all():
        raise FloatingPointError(f"{name}: the loss became NaN or inf (lower the learning rate)")
    pred = predict_classes(model, val[0]) if val is not None else None
    acc = None if val is None else float(np.mean(pred == np.asarray(val[1])))
    return TrainingCurve(name, losses_arr, acc, pred, seconds)


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
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    seed: int = 0,
    val: tuple[np.ndarray, np.ndarray] | None = None,
    names: tuple[str, str] | None = None,
    use_graph: tuple[bool, bool] = (False, False),
    copy_init: bool = True,
    perturb: float = 0.0,
    candidate_changes: Mapping[str, float] | None = None,
    progress: bool = True,
) -> TrainingAlignment:
    """Train ``reference`` and ``candidate`` identically and compare them step by step.

    With ``copy_init`` the candidate first receives the reference's weights (identical
    initialisation, checked bit for bit); ``perturb`` then nudges the candidate's weights by that
    relative amount (to measure how chaotic training itself is). Both see the same batches in the
    same order (a seeded shuffle per epoch) with the same optimizer settings. Dropout must be off
    (``p=0``) or absent: the frameworks draw different random masks. ``val=(x, y)`` adds held-out
    accuracy. The models train one after the other (their wall times are reported separately).

    ``reference`` may also be the :class:`TrainingCurve` of an earlier run with the same data and
    settings (e.g. ``earlier.reference``): it is reused instead of training again; the candidate
    must then already hold the same initial weights (``copy_init=False``).

    ``candidate_changes`` plants a difference in the candidate's optimizer only (a bug on purpose,
    to see whether a check catches it): ``{"eps": 1e-6}``, ``{"lr": 1.2 * lr}``; keys among
    ``lr``, ``momentum``, ``weight_decay``, ``eps``.
    """
    x = _as_inputs(x)
    y = np.ascontiguousarray(np.asarray(y, dtype=np.int64))
    if len(x) != len(y):
        raise ValueError(f"{len(x)} inputs but {len(y)} labels")
    settings = {
        "n": len(x),
        "steps": steps,
        "batch_size": batch_size,
        "optimizer": optimizer,
        "lr": lr,
        "momentum": momentum,
        "weight_decay": weight_decay,
        "seed": seed,
        "val": None if val is None else len(val[1]),
    }
    reuse = isinstance(reference, TrainingCurve)
    if reuse:
        if copy_init:
            raise ValueError(
                "a reused reference curve has no weights to copy: build the candidate with the same "
                "initial weights and pass copy_init=False"
            )
        if reference.settings != settings:
            raise ValueError(
                f"the reference curve was trained with {reference.settings}, not {settings}"
            )
    if names is None:
        names = (reference.name if reuse else framework_of(reference), framework_of(candidate))
    if names[0] == names[1]:
        raise ValueError(f"give the two runs different names, got {names}")
    if copy_init:
        transfer_weights(reference, candidate)
        a, b = _weights(reference), _weights(candidate)
        if not all(np.array_equal(a[k], b[k]) for k in a):
            raise RuntimeError("copying the initial weights into the candidate failed")
    if perturb:
        perturb_weights(candidate, perturb, seed=seed + 1)
    changes = dict(candidate_changes or {})
    unknown = sorted(set(changes) - set(_CHANGEABLE))
    if unknown:
        raise ValueError(
            f"candidate_changes may change {', '.join(_CHANGEABLE)}; got {', '.join(unknown)}"
        )
    order = batch_order(len(x), steps, batch_size, seed)
    common = dict(
        optimizer=optimizer,
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
        val=val,
        progress=progress,
    )
    if reuse:
        ref_curve = reference
    else:
        ref_curve = train_run(
            reference, x, y, order, name=names[0], use_graph=use_graph[0], **common
        )
        ref_curve.settings = settings
    cand_curve = train_run(
        candidate, x, y, order, name=names[1], use_graph=use_graph[1], **{**common, **changes}
    )
    cand_curve.settings = settings
    if ref_curve.name != names[0]:
        ref_curve = TrainingCurve(
            names[0],
            ref_curve.losses,
            ref_curve.accuracy,
            ref_curve.predictions,
            ref_curve.seconds,
            ref_curve.settings,
        )
    return TrainingAlignment(ref_curve, cand_curve, order)


_CHANGEABLE = ("lr", "momentum", "weight_decay", "eps")


def _check_no_dropout(model: Any) -> None:
    for name, module in getattr(model, "named_modules", lambda: [])():
        if type(module).__name__.startswith("Dropout") and getattr(module, "p", 0) > 0:
            raise ValueError(
                f"module {name!r} is {type(module).__name__}(p={module.p}): the two frameworks would "
                "draw different dropout masks; build the model with dropout=0 for training alignment"
            )
