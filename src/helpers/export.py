"""Export a PyTorch model to ONNX and verify it in one call.

``export_onnx`` writes the file (named inputs/outputs, dynamic batch axis) and runs
``onnx.checker``; ``export_and_verify`` also runs the file in ONNX Runtime on the
example input and asserts it matches the source model within a stated tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


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

    def __str__(self) -> str:
        ops = sum(self.op_counts.values())
        check = f"; ONNX Runtime vs source: max abs err {self.max_abs:.3g}, cosine {self.cosine:.8f}" if self.max_abs is not None else ""
        return f"{self.path.name}: opset {self.opset}, {ops} nodes ({len(self.op_counts)} op types){check}"


def op_counts(model_or_path: Any) -> dict[str, int]:
    """Number of nodes per op type in an ONNX model (path or ``onnx.ModelProto``), most frequent first."""
    import onnx

    model = onnx.load(str(model_or_path)) if isinstance(model_or_path, (str, Path)) else model_or_path
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def export_onnx(
    model: Any,
    example_input: Any,
    path: str | Path,
    *,
    input_name: str = "input",
    output_name: str = "output",
    dynamic_batch: bool = True,
    opset: int = 17,
    expected_rank: int | None = 4,
) -> ExportReport:
    """Export a ``torch.nn.Module`` (in eval mode) to ``path`` and run ``onnx.checker`` on the file.

    ``example_input`` must have rank ``expected_rank`` (4 = NCHW images; ``None`` skips the check),
    so a wrong input fails here with a clear message, not deep inside the exporter.
    """
    import onnx
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export_onnx needs a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(f"example_input must be a torch.Tensor, got {type(example_input).__name__}")
    if expected_rank is not None and example_input.dim() != expected_rank:
        raise ValueError(f"example input has rank {example_input.dim()} (shape {tuple(example_input.shape)}); "
                         f"the model expects rank {expected_rank}, e.g. (batch, 3, H, W)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    axes = {input_name: {0: "batch"}, output_name: {0: "batch"}} if dynamic_batch else None
    try:
        with torch.no_grad():
            torch.onnx.export(model, (example_input,), str(path), input_names=[input_name], output_names=[output_name],
                              dynamic_axes=axes, opset_version=opset, dynamo=False)
    finally:
        model.train(was_training)
    onnx.checker.check_model(str(path))
    return ExportReport(path=path, opset=opset, input_name=input_name, output_name=output_name, op_counts=op_counts(path))


def export_and_verify(
    model: Any, example_input: Any, path: str | Path, *, atol: float = 1e-4, min_cosine: float = 0.99999, **kwargs: Any
) -> ExportReport:
    """:func:`export_onnx`, then run the file in ONNX Runtime (CPU) and assert it matches the model.

    The default tolerance (1e-4 absolute) covers float32 accumulation-order differences between
    PyTorch's and ONNX Runtime's kernels; a real export bug is orders of magnitude larger.
    """
    import onnxruntime as ort
    import torch

    from .comparison import assert_outputs_close

    report = export_onnx(model, example_input, path, **kwargs)
    sess = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    x = example_input.detach().cpu().numpy().astype(np.float32)
    got = sess.run([report.output_name], {report.input_name: x})[0]
    with torch.no_grad():
        want = model.eval()(example_input)
    cmp = assert_outputs_close(got, want, atol=atol, min_cosine=min_cosine, name=f"ONNX Runtime vs PyTorch ({report.path.name})")
    report.max_abs, report.cosine = cmp.max_abs, cmp.cosine
    return report
