"""Precision alignment of two implementations of one model: your port against its original.

:func:`alignment_report` runs a reference and candidates (PyTorch vs OneFlow, eager vs graph, fp32
vs a float64 copy) on the same inputs: ``.table()``, ``.plot()`` (the element-wise errors) and
``report[name].comparison`` to check. Models: torch or OneFlow modules, ``nn.Graph``, TorchScript,
compiled modules, or NumPy callables; inputs go to each as float32 (float64 to a float64 model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.core.comparison import Comparison, compare, to_numpy
from helpers.show.table import ShowsAsTable, Table
from helpers.workload.predict import predict_batched

__all__ = ["as_float_batch", "alignment_report"]


def as_float_batch(inputs: Any) -> np.ndarray:
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


@dataclass(repr=False)
class AlignmentReport(ShowsAsTable):
    """How far each candidate's outputs are from the reference's on the same inputs."""

    reference_name: str
    samples: int
    reference_scale: float  # max |reference|, to read absolute errors against
    rows: list[AlignmentRow] = field(default_factory=list)

    def __getitem__(self, name: str) -> AlignmentRow:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no candidate named {name!r}; have {', '.join(r.name for r in self.rows)}")

    def table_rows(self) -> list[dict[str, Any]]:
        return [
            {"candidate": r.name, "max_abs": c.max_abs, "mean_abs": c.mean_abs}
            | {"max_rel": c.max_rel, "cosine": f"{c.cosine:.9f}"}
            | {f"top{k}_agree": f"{v:.0%}" for k, v in c.topk.items()}
            for r in self.rows
            for c in [r.comparison]
        ]

    def table(self) -> Table:
        """One row per candidate: errors against the reference, cosine, top-k agreement."""
        return Table(
            self.table_rows(),
            title=f"against {self.reference_name}, {self.samples} samples; largest "
            f"|{self.reference_name} output| {self.reference_scale:.3g}",
            floatfmt=".2e",
        )

    def plot(self, ax: Any = None, title: str = "") -> Any:
        """Histogram of log10 |candidate - reference| per element (exact zeros in the legend)."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(7, 3.5))[1]
        floor = 1e-12
        for i, r in enumerate(self.rows):
            nz = r.abs_errors[r.abs_errors > 0]
            zeros = r.abs_errors.size - nz.size
            equal = f", {zeros} exactly equal" if zeros else ""
            label = f"{r.name} (max {r.comparison.max_abs:.1e}{equal})"
            if nz.size:
                ax.hist(
                    np.log10(np.maximum(nz, floor)), bins=40, alpha=0.55, color=f"C{i}", label=label
                )
            else:
                ax.axvline(np.log10(floor), color=f"C{i}", label=label)
        eps = np.finfo(np.float32).eps * self.reference_scale
        ax.axvline(np.log10(eps), color="grey", ls="--", lw=1, label="float32 eps x max|output|")
        ax.set_xlabel(f"log10 |candidate - {self.reference_name}| per output element")
        ax.set_ylabel("elements")
        ax.set_title(title or f"error distribution against {self.reference_name}")
        ax.legend(fontsize=8)
        return ax


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

    ``candidates``: one model or ``{name: model}``. ``inputs`` (first axis samples) go
    ``batch_size`` at a time (default all; a OneFlow graph needs its compiled batch size). Top-k
    agreement for 2-D (samples, classes) outputs, each ``k`` up to the number of classes; top-1 by
    default: top-5 of 8 classes agrees even between unrelated models most of the time.
    """
    if not isinstance(candidates, Mapping):
        candidates = {"candidate": candidates}
    if not candidates:
        raise ValueError("give at least one candidate to compare with the reference")
    x = as_float_batch(inputs)
    ref = predict_batched(reference, x, batch_size)
    report = AlignmentReport(reference_name, len(x), float(np.abs(ref).max()))
    for name, model in candidates.items():
        out = predict_batched(model, x, batch_size)
        if out.shape != ref.shape:
            raise ValueError(
                f"outputs differ in shape: {reference_name} gives {ref.shape}, {name} gives {out.shape}; "
                "the two models do not compute the same thing (check the head, num_classes and input size)"
            )
        ks = tuple(k for k in topk if ref.ndim == 2 and k <= ref.shape[1])
        cmp = compare(out, ref, topk=ks)
        report.rows.append(AlignmentRow(name, cmp, np.abs(out - ref).ravel()))
    return report
