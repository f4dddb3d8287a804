"""Numerical comparison of outputs across frameworks (PyTorch, OneFlow, NumPy, ...).

``compare(a, b)`` measures how far two outputs are apart; ``assert_outputs_close``
turns that into an ``assert`` with a stated tolerance and an error message that
says what differed, where and by how much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "to_numpy",
    "topk_agreement",
    "Comparison",
    "compare",
    "assert_outputs_close",
    "rowwise_cosine",
    "nearest_neighbour_agreement",
    "max_cross_cosine",
]


def to_numpy(x: Any) -> np.ndarray:
    """Convert a torch / OneFlow tensor, NumPy array, scalar or nested list to a float64 NumPy array."""
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "detach") and hasattr(x, "cpu"):  # torch and OneFlow tensors
        t = x.detach().cpu()
        if str(getattr(t, "dtype", "")).endswith(("bfloat16", "float16")):
            t = t.float()
        arr = t.numpy()
    elif isinstance(x, (list, tuple, int, float, np.generic)):
        arr = np.asarray(x)
    else:
        raise TypeError(f"cannot convert {type(x).__module__}.{type(x).__name__} to a NumPy array")
    if arr.dtype == object:
        raise TypeError("cannot compare ragged or object arrays")
    return arr.astype(np.float64, copy=False)


def topk_agreement(a: Any, b: Any, k: int = 1) -> float:
    """Fraction of rows whose top-``k`` class sets are identical (rows = samples, columns = classes)."""
    x, y = to_numpy(a), to_numpy(b)
    if x.shape != y.shape:
        raise ValueError(f"shape mismatch: {x.shape} vs {y.shape}")
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_abs": self.max_abs,
            "mean_abs": self.mean_abs,
            "max_rel": self.max_rel,
            "cosine": self.cosine,
            **{f"top{k}_agreement": v for k, v in self.topk.items()},
        }

    def __str__(self) -> str:
        topk = ", ".join(f"top-{k} agreement {v:.1%}" for k, v in self.topk.items())
        return (
            f"shape {self.shape}: max abs err {self.max_abs:.3g}, mean abs err {self.mean_abs:.3g}, "
            f"max rel err {self.max_rel:.3g}, cosine {self.cosine:.8f}"
            + (f", {topk}" if topk else "")
        )


def compare(a: Any, b: Any, topk: Sequence[int] = (), rel_floor: float = 1e-6) -> Comparison:
    """Compare two outputs element-wise; ``topk`` adds top-k agreement for (samples, classes) logits.

    The relative error divides by ``max(|b|, rel_floor)`` so near-zero references do not explode it.
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
    rel = diff / np.maximum(np.abs(y), rel_floor)
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


def assert_outputs_close(
    actual: Any,
    expected: Any,
    *,
    atol: float,
    rtol: float = 0.0,
    min_cosine: float | None = None,
    min_topk: dict[int, float] | None = None,
    name: str = "outputs",
) -> Comparison:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` everywhere (plus optional cosine/top-k bounds).

    Returns the :class:`Comparison` so a notebook can print it.  On failure the
    ``AssertionError`` names how many elements failed, the worst one and the bound.
    """
    for label, value in (("atol", atol), ("rtol", rtol), ("min_cosine", min_cosine)):
        if value is not None and not (isinstance(value, (int, float)) and np.isfinite(value)):
            # NaN compares False with everything, so a NaN bound would make every check pass
            raise ValueError(f"{label} must be a finite number, got {value!r}")
    if atol < 0 or rtol < 0:
        raise ValueError("tolerances must be non-negative")
    if min_cosine is not None and not -1.0 <= min_cosine <= 1.0:
        raise ValueError(f"min_cosine must lie in [-1, 1], got {min_cosine}")
    for k, need in (min_topk or {}).items():
        if not (isinstance(need, (int, float)) and 0.0 <= need <= 1.0):
            raise ValueError(f"min_topk[{k}] must be a fraction in [0, 1], got {need!r}")
    cmp = compare(actual, expected, topk=tuple(min_topk or ()))
    x, y = to_numpy(actual), to_numpy(expected)
    bound = atol + rtol * np.abs(y)
    bad = np.abs(x - y) > bound
    problems = []
    if bad.any():
        i = cmp.worst_index
        problems.append(
            f"{int(bad.sum())} of {bad.size} elements differ by more than atol={atol:g} + rtol={rtol:g}*|expected|; "
            f"worst at index {i}: {cmp.worst_values[0]:.6g} vs {cmp.worst_values[1]:.6g} (abs err {cmp.max_abs:.3g})"
        )
    if min_cosine is not None and cmp.cosine < min_cosine:
        problems.append(f"cosine similarity {cmp.cosine:.8f} is below {min_cosine}")
    for k, need in (min_topk or {}).items():
        if cmp.topk[k] < need:
            problems.append(f"top-{k} agreement {cmp.topk[k]:.1%} is below {need:.1%}")
    if problems:
        raise AssertionError(f"{name} are not close: " + "; ".join(problems))
    return cmp


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


def nearest_neighbour_agreement(candidate: Any, reference: Any) -> float:
    """Fraction of rows of ``candidate`` whose most similar ``reference`` row (by cosine) is the same row.

    For embeddings this is what a matching service needs: an image's embedding from a faster runtime
    must still be closest to *its own* reference embedding, not to another image's.
    """
    x, y = to_numpy(candidate), to_numpy(reference)
    rowwise_cosine(x, y)  # validates shapes and norms
    if len(x) < 2:
        raise ValueError("need at least two rows to find a nearest neighbour")
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    return float(np.mean((xn @ yn.T).argmax(axis=1) == np.arange(len(x))))


def max_cross_cosine(reference: Any) -> float:
    """The largest cosine similarity between two *different* rows of ``reference``.

    A per-row cosine between two runtimes above this value cannot be confused with another sample.
    """
    y = to_numpy(reference)
    if y.ndim != 2 or len(y) < 2:
        raise ValueError(f"need a (samples >= 2, dim) array, got shape {y.shape}")
    yn = y / np.linalg.norm(y, axis=1, keepdims=True)
    sim = yn @ yn.T
    return float(sim[~np.eye(len(y), dtype=bool)].max())
