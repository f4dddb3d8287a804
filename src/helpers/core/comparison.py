"""Numerical comparison of outputs across frameworks: ``compare(a, b)`` measures how far apart
they are; :func:`assert_outputs_close` (elementwise, the precision policy's bound),
:func:`assert_task_level` (reduced precision, with controls that must fail) and
:func:`assert_classifier_logits` (a classifier's reduced-precision logits) make it a check."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core import precision
from helpers.core.arrays import to_numpy
from helpers.core.checks import check_number
from helpers.core.environment import PAGE_COLUMNS

__all__ = [
    "to_numpy",
    "NAN_BOUND",
    "Comparison",
    "compare",
    "assert_outputs_close",
    "bound_used",
    "TaskCheck",
    "assert_task_level",
    "assert_classifier_logits",
    "rowwise_cosine",
    "nearest_neighbour_agreement",
    "max_cross_cosine",
]

# Every bound is used as ``error > bound``: NaN compares False with everything, inf never fails.
NAN_BOUND = "a NaN or infinite bound would let any values pass"


def topk_agreement(a: Any, b: Any, k: int = 1) -> float:
    """Fraction of rows whose top-``k`` class sets are identical (rows = samples, columns = classes)."""
    x, y = to_numpy(a), to_numpy(b)  # of one shape (compare checked)
    if x.ndim != 2:
        raise ValueError(f"top-k agreement needs (samples, classes) logits, got shape {x.shape}")
    if not 1 <= k <= x.shape[1]:
        raise ValueError(f"k must be in 1..{x.shape[1]}, got {k}")
    tx = np.sort(np.argsort(-x, axis=1, kind="stable")[:, :k], axis=1)
    ty = np.sort(np.argsort(-y, axis=1, kind="stable")[:, :k], axis=1)
    return float(np.mean(np.all(tx == ty, axis=1)))


@dataclass
class Comparison:
    """How far two outputs are apart."""

    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    worst_index: tuple[int, ...]
    worst_values: tuple[float, float]
    topk: dict[int, float] = field(default_factory=dict)
    used: float | None = None  # the largest |error| / its bound (atol + rtol |ref|), once checked
    tolerance: Any = None  # the precision.Tolerance checked against, when a mode gave it

    def __str__(self) -> str:
        topk = ", ".join(f"top-{k} agreement {v:.1%}" for k, v in self.topk.items())
        checked = ""
        if self.used is not None:
            mode = f"{self.tolerance.mode} " if self.tolerance is not None else ""
            checked = f"; {self.used:.2g} of its {mode}bound"
        text = (
            f"shape {self.shape}: max abs err {self.max_abs:.3g}, mean abs err {self.mean_abs:.3g}, "
            f"max rel err {self.max_rel:.3g}, cosine {self.cosine:.8f}"
            + (f", {topk}" if topk else "")
            + checked
        )
        return textwrap.fill(text, width=PAGE_COLUMNS, subsequent_indent="  ")


def compare(a: Any, b: Any, topk: Sequence[int] = ()) -> Comparison:
    """Compare two outputs element-wise; ``topk`` adds top-k agreement for (samples, classes)
    logits. The relative error divides by ``max(|b|, 1e-6)``: near-zero references do not explode it.
    """
    x, y = to_numpy(a), to_numpy(b)
    if x.shape != y.shape:
        raise ValueError(f"cannot compare outputs of different shapes: {x.shape} vs {y.shape}")
    if x.size == 0:
        raise ValueError("cannot compare empty outputs")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        bad = "first" if not np.isfinite(x).all() else "second"
        raise ValueError(f"the {bad} output contains NaN or inf values")
    diff = np.abs(x - y)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    rel = diff / np.maximum(np.abs(y), 1e-6)
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    cosine = (
        float(np.dot(x.ravel(), y.ravel()) / (nx * ny)) if nx > 0 and ny > 0 else float(nx == ny)
    )
    return Comparison(
        shape=tuple(x.shape),
        max_abs=float(diff.max()),
        mean_abs=float(diff.mean()),
        max_rel=float(rel.max()),
        cosine=cosine,
        worst_index=tuple(int(i) for i in idx),
        worst_values=(float(x[idx]), float(y[idx])),
        topk={k: topk_agreement(x, y, k) for k in topk},
    )


REDUCED = ("tf32", "bf16", "fp16", "int8")


def _policy_bound(
    mode: str, network: str | None, accumulation: float | str, expected: Any
) -> precision.Tolerance:
    """The precision policy's elementwise bound, refused for a whole network in a reduced mode."""
    if mode in REDUCED and accumulation == "network":
        raise ValueError(
            f"an elementwise {mode} bound on a whole network is as large as its outputs and "
            "cannot fail on a real bug: compare at task level (assert_task_level), or compare "
            "in strict float32"
        )
    scale = precision.output_scale(expected)
    return precision.tolerance(mode, accumulation=accumulation, network=network, scale=scale)


def _used(x: np.ndarray, y: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """|x - y| / (atol + rtol |y|) per element: above 1 fails (0 / 0 counts as 0)."""
    err = np.abs(x - y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(err == 0, 0.0, err / (atol + rtol * np.abs(y)))


def assert_outputs_close(
    actual: Any,
    expected: Any,
    *,
    atol: float | None = None,
    rtol: float = 0.0,
    mode: str | None = None,
    network: str | None = None,
    accumulation: float | str = "network",
    min_cosine: float | None = None,
    min_topk: dict[int, float] | None = None,
    name: str = "outputs",
) -> Comparison:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` everywhere (and the optional
    cosine/top-k bounds), the bound given as ``atol``/``rtol`` or as the math ``mode``
    (:func:`helpers.core.precision.tolerance` with ``network``, ``accumulation`` and the scale of
    ``expected``; refused for a whole network in a reduced mode, where it passes real bugs).
    Returns the :class:`Comparison`; its ``used`` is the largest error as a fraction of its bound.
    """
    tol = None
    if mode is not None:
        if atol is not None:
            raise ValueError("give the bound as a mode or as atol/rtol, not both")
        tol = _policy_bound(mode, network, accumulation, expected)
        atol, rtol = tol.atol, tol.rtol
    if atol is None:
        raise ValueError("give the bound: atol (and rtol), or the math mode")
    check_number("atol", atol, minimum=0.0, why=NAN_BOUND)
    check_number("rtol", rtol, minimum=0.0, why=NAN_BOUND)
    if min_cosine is not None:
        check_number("min_cosine", min_cosine, minimum=-1.0, maximum=1.0, why=NAN_BOUND)
    for k, need in (min_topk or {}).items():
        check_number(f"min_topk[{k}]", need, minimum=0.0, maximum=1.0, why=NAN_BOUND)
    cmp = compare(actual, expected, topk=tuple(min_topk or ()))
    used = _used(to_numpy(actual), to_numpy(expected), atol, rtol)
    cmp.used, cmp.tolerance = float(used.max()), tol
    problems = []
    bad = used > 1
    if bad.any():
        i, (a, b) = cmp.worst_index, cmp.worst_values
        problems.append(
            f"{int(bad.sum())} of {bad.size} elements differ by more than atol={atol:g} + "
            f"rtol={rtol:g}*|expected|; worst at index {i}: {a:.6g} vs {b:.6g} "
            f"(abs err {cmp.max_abs:.3g})"
        )
    if min_cosine is not None and cmp.cosine < min_cosine:
        problems.append(f"cosine {cmp.cosine:.9f} below {min_cosine}")
    problems += [
        f"top-{k} agreement {cmp.topk[k]:.1%} below {need:.1%}"
        for k, need in (min_topk or {}).items()
        if cmp.topk[k] < need
    ]
    if problems:
        raise AssertionError(f"{name} are not close: " + "; ".join(problems))
    return cmp


def bound_used(
    actual: Any,
    expected: Any,
    *,
    mode: str,
    network: str | None = None,
    accumulation: float | str = "network",
) -> float:
    """The ``used`` that :func:`assert_outputs_close` reports with the same ``mode`` (above 1 it
    fails), without raising: for tables of checks and planted bugs, where a failure is a result."""
    x, y = to_numpy(actual), to_numpy(expected)
    compare(x, y)  # refuses different shapes, empty outputs, NaN and inf
    tol = _policy_bound(mode, network, accumulation, y)
    return float(_used(x, y, tol.atol, tol.rtol).max())


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def rowwise_cosine(a: Any, b: Any) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b`` (e.g. embeddings of the same images)."""
    x, y = to_numpy(a), to_numpy(b)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(
            f"need two (samples, dim) arrays of the same shape, got {x.shape} and {y.shape}"
        )
    nx, ny = np.linalg.norm(x, axis=1), np.linalg.norm(y, axis=1)
    if (nx == 0).any() or (ny == 0).any():
        raise ValueError("a row has zero norm: cosine similarity is undefined")
    return np.sum(x * y, axis=1) / (nx * ny)


def _nearest_own(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> float:
    # The fraction of rows of x whose nearest row of y (by cosine) is their own, or with
    # ``groups`` one of their own group (a trained classifier's class); with ``rows`` (a
    # boolean mask), the fraction over those rows only.
    nearest = (_unit_rows(x) @ _unit_rows(y).T).argmax(axis=1)
    hit = nearest == np.arange(len(x)) if groups is None else groups[nearest] == groups
    return float(np.mean(hit if rows is None else hit[rows]))


def nearest_neighbour_agreement(candidate: Any, reference: Any) -> float:
    """Fraction of rows of ``candidate`` whose most similar ``reference`` row (by cosine) is the
    same row."""
    x, y = to_numpy(candidate), to_numpy(reference)
    rowwise_cosine(x, y)  # validates shapes and norms
    if len(x) < 2:
        raise ValueError("need at least two rows to find a nearest neighbour")
    return _nearest_own(x, y)


def max_cross_cosine(reference: Any) -> float:
    """The largest cosine similarity between two *different* rows of ``reference``: a per-row
    cosine between two runtimes above it cannot be confused with another sample."""
    y = to_numpy(reference)
    if y.ndim != 2 or len(y) < 2:
        raise ValueError(f"need a (samples >= 2, dim) array, got shape {y.shape}")
    sim = _unit_rows(y) @ _unit_rows(y).T
    return float(sim[~np.eye(len(y), dtype=bool)].max())


@dataclass
class TaskCheck:
    """What :func:`assert_task_level` checked, and that its controls failed."""

    name: str
    mode: str
    rows: int
    nearest_own: float  # fraction of rows nearest (by cosine) their own reference row
    min_cosine: float  # the lowest cosine of a row with its own reference row
    decided: int | None  # logits: rows whose reference decision is wider than the mode's error
    kept: int | None  # of those, rows whose top-1 class stayed the same
    top1: float | None  # logits: top-1 agreement over all rows (shown, not required)
    controls: dict[str, float]  # a control's nearest-own fraction (each must fail the check)
    by_class: bool = False  # decided rows nearest a reference of their class (a trained model)
    accuracy_drop: float | None = None  # points of held-out accuracy lost (classifier rule)
    nearest_own_all: float | None = None  # with by_class: the fraction over every row

    def brief(self) -> str:
        """What was required and found, and the controls, in one unwrapped line (a table cell)."""
        own = "a reference of its class" if self.by_class else "its own reference"
        which = "decided row" if self.by_class else "row"
        every = "" if self.nearest_own_all is None else f" (every row {self.nearest_own_all:.0%})"
        parts = [
            f"each {which} nearest {own} {self.nearest_own:.0%}{every}, lowest cosine "
            f"{self.min_cosine:.4f}"
        ]
        if self.decided:
            parts.append(f"top-1 kept on {self.kept}/{self.decided} rows decided beyond the error")
        elif self.decided == 0:
            parts.append("no row decided beyond the error bound: top-1 not checked")
        if self.top1 is not None:
            parts.append(f"top-1 agreement {self.top1:.0%} overall")
        if self.accuracy_drop is not None:
            parts.append(f"accuracy {0.0 - self.accuracy_drop:+.2f} points vs reference")
        ctl = ", ".join(f"{k} {v:.0%}" for k, v in self.controls.items())
        return "; ".join(parts) + f"; controls fail ({ctl} nearest own)"

    def __str__(self) -> str:
        text = f"{self.name} ({self.mode}, {self.rows} rows): {self.brief()}"
        return textwrap.fill(text, width=PAGE_COLUMNS, subsequent_indent="  ")


def assert_task_level(
    candidate: Any,
    reference: Any,
    *,
    mode: str,
    logits: bool = False,
    network: str | None = None,
    by_class: bool = False,
    name: str = "outputs",
) -> TaskCheck:
    """Assert that a reduced-precision result still does its float32 reference's task; rows are
    samples, each flattened (logits, embeddings, saliency maps alike).

    - Every row nearest its own reference (by cosine): data-relative, no literal, no bound
      larger than the signal.
    - ``logits=True``: a row whose reference top-1 leads the runner-up by more than twice the
      mode's elementwise bound keeps its top-1; rows inside it are counted, not required.
    - ``by_class``: each decided row nearest a reference of its own class instead (a trained
      classifier gives one class's images nearly the same logits; a row on a class boundary may
      land on either side).
    - Controls that must fail: the candidate negated, and its rows shifted by one (each image
      paired with another's reference); if either passes, the data cannot tell right from wrong.
    """
    precision.unit_roundoff(mode)  # validates the mode
    x, y = to_numpy(candidate), to_numpy(reference)
    compare(x, y)  # refuses different shapes, empty outputs, NaN and inf
    if x.ndim < 2 or len(x) < 2:
        raise ValueError(f"need at least two rows (samples) for a task-level check, got {x.shape}")
    x, y = x.reshape(len(x), -1), y.reshape(len(y), -1)
    cos = rowwise_cosine(x, y)  # refuses a zero row: its cosine is undefined
    if by_class and not logits:
        raise ValueError("by_class compares decisions: it needs logits=True")
    groups = y.argmax(axis=1) if by_class else None
    if _nearest_own(y, y) < 1.0:
        raise AssertionError(
            f"{name}: the reference rows are too alike to identify themselves (duplicates, or a "
            "model that gives every sample the same output): use distinct samples or a trained model"
        )
    decided = kept = top1 = required = None
    problems = []
    if logits:
        tol = precision.tolerance(mode, network=network, scale=precision.output_scale(y))
        top2 = np.sort(y, axis=1)[:, -2:]
        sure = (top2[:, 1] - top2[:, 0]) > 2 * tol.atol
        same = x.argmax(axis=1) == y.argmax(axis=1)
        decided, kept, top1 = int(sure.sum()), int((same & sure).sum()), float(same.mean())
        if kept < decided:
            problems.append(
                f"top-1 changed on {decided - kept} of {decided} rows whose reference decision is "
                f"wider than twice the {mode} bound ({tol.atol:.3g})"
            )
        if by_class and not sure.any():
            raise AssertionError(
                f"{name}: no row is decided beyond twice the {mode} bound, so no row can be "
                "held to its class (a model that learned nothing?)"
            )
        required = sure if by_class else None
    own = _nearest_own(x, y, groups, required)
    if own < 1.0:
        problems.append(
            f"only {own:.0%} of {'the rows' if required is None else 'the decided rows'} are "
            f"nearest {'a reference of their own class' if by_class else 'their own reference'} "
            "(need all)"
        )
    if problems:
        raise AssertionError(f"{name} fail the task-level check: " + "; ".join(problems))
    controls = {
        "negated": _nearest_own(-x, y, groups, required),
        "shifted rows": _nearest_own(np.roll(x, 1, 0), y, groups, required),
    }
    passing = [k for k, v in controls.items() if v >= 1.0]
    if passing:
        raise AssertionError(
            f"{name}: the control(s) {passing} pass the check too: these rows are too alike to "
            "tell a right answer from a wrong one (use more distinct samples or a trained model)"
        )
    return TaskCheck(
        name=name,
        mode=mode,
        rows=len(x),
        nearest_own=own,
        min_cosine=float(cos.min()),
        decided=decided,
        kept=kept,
        top1=top1,
        controls=controls,
        by_class=by_class,
        nearest_own_all=None if required is None else _nearest_own(x, y, groups),
    )


def assert_classifier_logits(
    candidate: Any,
    reference: Any,
    labels: Any = None,
    *,
    mode: str,
    network: str | None = None,
    max_drop: float = 0.02,
    name: str = "logits",
) -> TaskCheck:
    """The course's rule for a classifier's reduced-precision logits: :func:`assert_task_level`
    with ``logits`` and ``by_class``, and with ``labels`` held-out accuracy at
    most ``max_drop`` (a fraction) below the reference's."""
    drop = None
    if labels is not None:
        y = to_numpy(labels).reshape(-1)
        x, r = to_numpy(candidate), to_numpy(reference)
        if len(y) != len(x) or len(x) != len(r):
            raise ValueError(f"{len(y)} labels for {len(x)} rows and {len(r)} reference rows")
        drop = 100 * float(np.mean(r.argmax(1) == y) - np.mean(x.argmax(1) == y))
        if drop > 100 * max_drop:
            raise AssertionError(
                f"{name} fail the task-level check: held-out accuracy {drop:.2f} points below "
                f"the reference (at most {100 * max_drop:g} allowed)"
            )
    check = assert_task_level(
        candidate, reference, mode=mode, network=network, name=name, logits=True, by_class=True
    )
    check.accuracy_drop = drop
    return check
