"""Export a PyTorch (or OneFlow) model to ONNX, verify it, and see what graph rewrites do.

``export_onnx`` writes the file (named inputs/outputs, dynamic batch axis) and runs
``onnx.checker``; ``export_and_verify`` also runs the file in ONNX Runtime on the
example input and asserts it matches the source model within a stated tolerance.
``export_onnx(..., fold_constants=False)`` keeps the graph as traced (BatchNorm nodes,
Identity chains) so ``simplify`` (ONNX Runtime's offline 'basic' rewrites: constant
folding, Conv+BatchNorm folding, redundant-node removal) can be shown as op counts
before and after (``op_count_table``). ``export_oneflow_onnx`` converts a OneFlow
``nn.Graph`` with oneflow-onnx and checks it against OneFlow.
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
        check = (
            f"; ONNX Runtime vs source: max abs err {self.max_abs:.3g}, cosine {self.cosine:.8f}"
            if self.max_abs is not None
            else ""
        )
        return f"{self.path.name}: opset {self.opset}, {ops} nodes ({len(self.op_counts)} op types){check}"


def _load(model_or_path: Any) -> Any:
    import onnx

    if isinstance(model_or_path, (str, Path)):
        if not Path(model_or_path).is_file():
            raise FileNotFoundError(f"no ONNX file at {model_or_path}")
        return onnx.load(str(model_or_path))
    if not isinstance(model_or_path, onnx.ModelProto):
        raise TypeError(
            f"expected a path or an onnx.ModelProto, got {type(model_or_path).__name__}"
        )
    return model_or_path


def op_counts(model_or_path: Any, with_domain: bool = False) -> dict[str, int]:
    """Number of nodes per op type in an ONNX model (path or ``onnx.ModelProto``), most frequent first.

    With ``with_domain`` an op outside the standard ONNX domain is named ``domain:op`` (e.g.
    ``com.microsoft:FusedConv``), which shows where a runtime replaced standard ops by its own.
    """
    model = _load(model_or_path)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        key = (
            f"{node.domain}:{node.op_type}"
            if with_domain and node.domain not in ("", "ai.onnx")
            else node.op_type
        )
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def op_count_table(graphs: dict[str, Any], with_domain: bool = False) -> list[dict[str, Any]]:
    """Rows ``{op, <graph name>: count, ...}`` comparing op counts of several graphs (plus a total row).

    ``graphs`` maps a column name to a path, ``onnx.ModelProto`` or an already computed ``op_counts`` dict.
    """
    if not graphs:
        raise ValueError("give at least one graph to count")
    counts = {
        name: g if isinstance(g, dict) else op_counts(g, with_domain) for name, g in graphs.items()
    }
    ops: list[str] = []
    for c in counts.values():
        ops.extend(op for op in c if op not in ops)
    rows = [{"op": op, **{name: c.get(op, 0) for name, c in counts.items()}} for op in ops]
    rows.append({"op": "total nodes", **{name: sum(c.values()) for name, c in counts.items()}})
    return rows


def io_shapes(model_or_path: Any) -> dict[str, tuple[Any, ...]]:
    """Input and output shapes of an ONNX graph (symbolic dimensions by name, e.g. ``('batch', 3, 224, 224)``)."""
    model = _load(model_or_path)

    def dims(v: Any) -> tuple[Any, ...]:
        return tuple(d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim)

    inits = {i.name for i in model.graph.initializer}
    return {
        **{v.name: dims(v) for v in model.graph.input if v.name not in inits},
        **{v.name: dims(v) for v in model.graph.output},
    }


def infer_shapes(model_or_path: Any) -> dict[str, tuple[Any, ...]]:
    """Run ONNX shape inference; return the shape of every intermediate tensor it could infer.

    A graph whose intermediate shapes are all known is one a runtime can plan memory for ahead of time.
    """
    import onnx

    model = onnx.shape_inference.infer_shapes(_load(model_or_path), strict_mode=True)
    produced = {
        out for node in model.graph.node if node.op_type != "Constant" for out in node.output
    }
    return {
        v.name: tuple(d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in model.graph.value_info
        if v.name in produced
    }


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
    fold_constants: bool = True,
) -> ExportReport:
    """Export a ``torch.nn.Module`` (in eval mode) to ``path`` and run ``onnx.checker`` on the file.

    ``example_input`` must have rank ``expected_rank`` (4 = NCHW images; ``None`` skips the check),
    so a wrong input fails here with a clear message, not deep inside the exporter.
    ``fold_constants=False`` writes the graph as traced: no constant folding and BatchNorm kept as
    its own node (``training=PRESERVE`` skips the exporter's eval-mode Conv+BN fusion) -- the
    "before" picture for :func:`simplify`. Outputs are the same either way.
    """
    import onnx
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export_onnx needs a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(f"example_input must be a torch.Tensor, got {type(example_input).__name__}")
    if expected_rank is not None and example_input.dim() != expected_rank:
        raise ValueError(
            f"example input has rank {example_input.dim()} (shape {tuple(example_input.shape)}); "
            f"the model expects rank {expected_rank}, e.g. (batch, 3, H, W)"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    model.eval()
    axes = {input_name: {0: "batch"}, output_name: {0: "batch"}} if dynamic_batch else None
    try:
        with torch.no_grad():
            mode = (
                torch.onnx.TrainingMode.EVAL if fold_constants else torch.onnx.TrainingMode.PRESERVE
            )
            torch.onnx.export(
                model,
                (example_input,),
                str(path),
                input_names=[input_name],
                output_names=[output_name],
                dynamic_axes=axes,
                opset_version=opset,
                dynamo=False,
                do_constant_folding=fold_constants,
                training=mode,
            )
    finally:
        model.train(was_training)
    onnx.checker.check_model(str(path))
    return ExportReport(
        path=path,
        opset=opset,
        input_name=input_name,
        output_name=output_name,
        op_counts=op_counts(path),
    )


def export_and_verify(
    model: Any,
    example_input: Any,
    path: str | Path,
    *,
    atol: float = 1e-4,
    min_cosine: float = 0.99999,
    rtol: float = 0.0,
    **kwargs: Any,
) -> ExportReport:
    """:func:`export_onnx`, then run the file in ONNX Runtime (CPU) and assert it matches the model.

    The default tolerance (1e-4 absolute) covers float32 accumulation-order differences between
    PyTorch's and ONNX Runtime's kernels; a real export bug is orders of magnitude larger.
    """
    import onnxruntime as ort
    import torch

    from helpers.core.comparison import assert_outputs_close

    report = export_onnx(model, example_input, path, **kwargs)
    sess = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    x = example_input.detach().cpu().numpy().astype(np.float32)
    got = sess.run([report.output_name], {report.input_name: x})[0]
    was_training = model.training
    try:
        with torch.no_grad():
            want = model.eval()(example_input)
    finally:
        model.train(was_training)  # verifying must not leave a model that was training in eval mode
    cmp = assert_outputs_close(
        got,
        want,
        atol=atol,
        rtol=rtol,
        min_cosine=min_cosine,
        name=f"ONNX Runtime vs PyTorch ({report.path.name})",
    )
    report.max_abs, report.cosine = cmp.max_abs, cmp.cosine
    return report


def simplify(src: str | Path, dst: str | Path) -> ExportReport:
    """Simplify an ONNX graph offline with ONNX Runtime's 'basic' rewrites and check the result.

    Constant folding, Conv+BatchNorm folding (the BN scale and shift go into the conv's weights and
    bias), and removal of Identity and redundant Shape/Reshape/Cast chains. The output uses standard
    ONNX ops only, so any runtime can load it (unlike ONNX Runtime's 'extended'/'all' levels).
    """
    import onnx

    from helpers.deploy.runtimes import optimize_offline

    src = Path(src)
    optimize_offline(src, dst, "basic")
    onnx.checker.check_model(str(dst))
    model = onnx.load(str(dst))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return ExportReport(
        path=Path(dst),
        opset=opset,
        input_name=model.graph.input[0].name,
        output_name=model.graph.output[0].name,
        op_counts=op_counts(model),
    )


def rename_io(model_or_path: Any, renames: dict[str, str], dst: str | Path | None = None) -> Any:
    """Rename graph inputs/outputs (``{old: new}``) everywhere they are used; save to ``dst`` if given.

    Converters name tensors after internal ops (``_G_0_input.0.0_2/out``); a served model wants
    stable names such as ``input`` and ``output``.
    """
    import onnx

    model = _load(model_or_path)
    graph = model.graph
    known = {v.name for v in graph.input} | {v.name for v in graph.output}
    unknown = [k for k in renames if k not in known]
    if unknown:
        raise KeyError(f"{unknown} are not inputs or outputs of the graph (it has {sorted(known)})")
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        if v.name in renames:
            v.name = renames[v.name]
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    if dst is not None:
        onnx.save(model, str(dst))
    return model


def _import_oneflow_onnx() -> Any:
    """Import oneflow-onnx's exporter (OneFlow first, quietly; NumPy 1.24+ removed ``np.bool``, which it uses)."""
    from helpers.core.environment import import_oneflow

    import_oneflow()
    if "bool" not in np.__dict__:  # (hasattr would trigger NumPy's FutureWarning about np.bool)
        np.bool = np.bool_  # type: ignore[attr-defined]
    from oneflow_onnx.oneflow2onnx.flow2onnx import Export

    return Export


def export_oneflow_onnx(
    model: Any,
    example_input: Any,
    path: str | Path,
    *,
    input_name: str = "input",
    output_name: str = "output",
    opset: int = 13,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    min_cosine: float = 0.99999,
    expected_rank: int | None = 4,
) -> ExportReport:
    """Convert a OneFlow ``nn.Module`` or ``nn.Graph`` to ONNX with oneflow-onnx, check it, and compare with OneFlow.

    A module is wrapped in an inference ``nn.Graph`` first (oneflow-onnx converts compiled graphs).
    The graph is traced at the example's batch size and the file keeps it: oneflow-onnx 0.6.2 bakes the
    traced batch into reshapes such as ResNet's flatten, so export one file per batch size you serve.
    Inputs and outputs are renamed to ``input_name``/``output_name``. The tolerance is float32
    accumulation-order noise: ``atol + rtol * |expected|``, with a relative part because that noise
    grows with the size of the values and the depth of the network (ResNet-101 logits move by ~1e-4).
    """
    import contextlib
    import io
    import tempfile

    import onnx
    import onnxruntime as ort

    from helpers.core.comparison import assert_outputs_close
    from helpers.core.environment import import_oneflow

    flow = import_oneflow()
    if isinstance(example_input, np.ndarray):
        example_input = flow.tensor(np.ascontiguousarray(example_input, dtype=np.float32))
    if not isinstance(example_input, flow.Tensor):
        raise TypeError(
            f"example_input must be a OneFlow tensor or NumPy array, got {type(example_input).__name__}"
        )
    if expected_rank is not None and example_input.dim() != expected_rank:
        raise ValueError(
            f"example input has rank {example_input.dim()} (shape {tuple(example_input.shape)}); "
            f"the model expects rank {expected_rank}, e.g. (batch, 3, H, W)"
        )
    if isinstance(model, flow.nn.Graph):
        graph = model
    elif isinstance(model, flow.nn.Module):
        model.eval()

        class InferenceGraph(flow.nn.Graph):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def build(self, x: Any) -> Any:
                return self.model(x)

        graph = InferenceGraph()
    else:
        raise TypeError(
            f"export_oneflow_onnx needs a oneflow.nn.Module or nn.Graph, got {type(model).__name__}"
        )
    Export = _import_oneflow_onnx()
    with flow.no_grad():
        want = graph(
            example_input
        ).numpy()  # compiles the graph; the exporter reads the compiled job
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        weights = Path(tmp) / "weights"
        flow.save(graph.state_dict(), str(weights))
        Export(graph, str(weights), str(path), opset=opset, dynamic_batch_size=False)
    model_proto = onnx.load(str(path))
    renames = {
        model_proto.graph.input[0].name: input_name,
        model_proto.graph.output[0].name: output_name,
    }
    rename_io(model_proto, renames, dst=path)
    onnx.checker.check_model(str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run([output_name], {input_name: example_input.numpy()})[0]
    cmp = assert_outputs_close(
        got,
        want,
        atol=atol,
        rtol=rtol,
        min_cosine=min_cosine,
        name=f"ONNX Runtime vs OneFlow nn.Graph ({path.name})",
    )
    opset_used = next(
        (o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx")), 0
    )
    return ExportReport(
        path=path,
        opset=opset_used,
        input_name=input_name,
        output_name=output_name,
        op_counts=op_counts(path),
        max_abs=cmp.max_abs,
        cosine=cmp.cosine,
    )
