"""Export a PyTorch model to ONNX and verify it in ONNX Runtime; count a graph's ops.

Chapter 7 writes the export on its page (``torch.export`` with a dynamic batch axis, then
``torch.onnx.export(..., dynamo=True)``, ``onnx.checker``, the file asserted against PyTorch);
chapters 8-10 reuse it, so ``tools/save_cells.py`` copies those cells to the end of this module.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from helpers.core import precision
from helpers.core.comparison import assert_outputs_close

__all__ = [
    "ExportReport",
    "op_counts",
    "op_count_table",
    "graph_inputs",
    "quiet_exporter",
    "export_onnx",
    "export_and_verify",
    "numpy_bool_alias",
]


@dataclass
class ExportReport:
    """What an export produced and how close ONNX Runtime is to the source model."""

    path: Path
    opset: int
    input_name: str
    output_name: str
    op_counts: dict[str, int]
    max_abs: float | None = None
    cosine: float | None = None
    tolerance: precision.Tolerance | None = None  # the bound the verification asserted

    def __str__(self) -> str:
        ops, check, tol = sum(self.op_counts.values()), "", self.tolerance
        if tol is not None:  # verified: export_and_verify sets all three
            check = f"; ONNX Runtime vs source: max abs err {self.max_abs:.3g}"
            check += f", cosine {self.cosine:.8f}"
            check += f" (within {tol.mode} tolerance: atol {tol.atol:.2g}, rtol {tol.rtol:.2g})"
        return f"{self.path.name}: opset {self.opset}, {ops} nodes ({len(self.op_counts)} op types){check}"


def op_counts(path: str | Path, with_domain: bool = False) -> dict[str, int]:
    """Nodes per op type of the ONNX file at ``path``, most frequent first.

    ``with_domain``: an op outside the standard domain is ``domain:op``
    (``com.microsoft:FusedConv``), showing where a runtime replaced standard ops by its own.
    """
    counts = collections.Counter(
        f"{node.domain}:{node.op_type}"
        if with_domain and node.domain not in ("", "ai.onnx")
        else node.op_type
        for node in onnx.load(str(path)).graph.node
    )
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def op_count_table(graphs: dict[str, str | Path]) -> list[dict[str, Any]]:
    """Rows ``{op, <graph name>: count, ...}`` (and a total row) comparing ONNX files by name."""
    if not graphs:
        raise ValueError("give at least one graph to count")
    counts = {name: op_counts(path) for name, path in graphs.items()}
    ops = list(dict.fromkeys(op for c in counts.values() for op in c))
    rows = [{"op": op, **{name: c.get(op, 0) for name, c in counts.items()}} for op in ops]
    rows.append({"op": "total nodes", **{name: sum(c.values()) for name, c in counts.items()}})
    return rows


def graph_inputs(path: str | Path) -> list[str]:
    """Names of an ONNX file's real inputs (graph inputs that are not initializers), in order."""
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    return [v.name for v in model.graph.input if v.name not in inits]


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Hide torch.onnx's harmless noise inside the block, and only there.

    The dynamo exporter's registry logs "Missing annotation" for each torchvision detection op
    (``roi_align``, ...; no course model uses them) and torch 2.10's pytree warns that
    ``LeafSpec`` is deprecated. Errors still raise, other warnings still show.
    """
    log = logging.getLogger("torch.onnx._internal.exporter._schemas")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        log.setLevel(level)


# ---- saved from notebooks/07_onnx_runtimes.ipynb by tools/save_cells.py: edit it there ----
# The lesson's listing: capture the graph, export it to ONNX, check what was written.
def export_onnx(
    model: torch.nn.Module,
    example_input: torch.Tensor,
    path: str | Path,
    *,
    input_name: str = "input",
    output_name: str = "output",
    dynamic_batch: bool = True,
    opset: int = 18,
    expected_rank: int | None = 4,
    fold_constants: bool = True,
) -> ExportReport:
    """Export ``model`` in eval mode to ``path`` with named input and output; check it.

    ``dynamic_batch``: axis 0 is the symbol ``batch``; ``expected_rank``: the example's
    (None: unchecked); ``fold_constants=False``: the graph as captured (BatchNorm kept).
    """
    if not isinstance(model, torch.nn.Module) or not torch.is_tensor(example_input):
        raise TypeError("export_onnx needs a torch.nn.Module and a torch.Tensor example")
    shape = tuple(example_input.shape)
    if expected_rank is not None and len(shape) != expected_rank:
        raise ValueError(
            f"example input has rank {len(shape)} {shape}; the model expects rank "
            f"{expected_rank}, e.g. (batch, 3, H, W)"
        )
    if dynamic_batch and shape[0] < 2:  # torch.export takes a size of 1 as fixed
        raise ValueError("a dynamic batch needs an example batch of at least 2")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    shapes = ({0: torch.export.Dim("batch", min=1)},) if dynamic_batch else None
    was_training = model.training
    try:
        with torch.no_grad(), quiet_exporter():
            program = torch.export.export(
                model.eval(), (example_input,), dynamic_shapes=shapes
            )  # the whole forward pass as one graph, or an error (chapter 3)
            torch.onnx.export(
                program,
                (example_input,),
                str(path),
                dynamo=True,  # the exporter that translates an ExportedProgram
                input_names=[input_name],
                output_names=[output_name],
                dynamic_shapes=shapes,  # names the free axis "batch" in the file
                opset_version=opset,
                optimize=fold_constants,  # onnxscript's optimizer: constants, BatchNorm
                external_data=False,  # the weights inside the one file
                verbose=False,
            )
    finally:
        model.train(was_training)
    onnx.checker.check_model(str(path))  # structure, types, opset: malformed fails here
    return ExportReport(Path(path), opset, input_name, output_name, op_counts(path))


def export_and_verify(
    model: torch.nn.Module,
    example_input: torch.Tensor,
    path: str | Path,
    *,
    tolerance: precision.Tolerance | None = None,
    network: str | None = None,
    min_cosine: float = 0.99999,
    **kwargs,
) -> ExportReport:
    """:func:`export_onnx`, then assert ONNX Runtime (CPU) gives ``model``'s outputs.

    The policy's bound for both math modes, ``network`` (None: the deepest network's
    factor) and the outputs' scale, unless ``tolerance`` is given; and ``min_cosine``.
    """
    report = export_onnx(model, example_input, path, **kwargs)
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    x = example_input.detach().cpu().numpy().astype(np.float32)
    got = session.run([report.output_name], {report.input_name: x})[0]
    was_training = model.training
    try:
        with torch.no_grad():
            want = model.eval()(example_input)
    finally:
        model.train(was_training)  # verifying leaves a training model in training mode
    mode = precision.coarsest("fp32", precision.torch_math_mode(example_input.device))
    scale = precision.output_scale(want)
    tol = tolerance or precision.tolerance(mode, network=network, scale=scale)
    name = f"ONNX Runtime vs PyTorch ({report.path.name})"
    cmp = assert_outputs_close(got, want, **tol.as_kwargs(), min_cosine=min_cosine, name=name)
    report.max_abs, report.cosine, report.tolerance = cmp.max_abs, cmp.cosine, tol
    return report


# ---- end of cells saved from notebooks/07_onnx_runtimes.ipynb ----


# ---- saved from notebooks/07a_oneflow_to_onnx.ipynb by tools/save_cells.py: edit it there ----
@contextlib.contextmanager
def numpy_bool_alias() -> Iterator[None]:
    """``np.bool`` as an alias of ``np.bool_`` inside the block only, for old code.

    NumPy 1.24 removed it (NumPy 2 brought ``np.bool`` back; then nothing changes). On
    leaving, also on an error, NumPy is as it was.
    """
    added = "bool" not in np.__dict__
    if added:
        np.bool = np.bool_
    try:
        yield
    finally:
        if added:
            del np.bool


# ---- end of cells saved from notebooks/07a_oneflow_to_onnx.ipynb ----
