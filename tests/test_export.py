"""helpers.deploy.export: ONNX export, verification, simplification and op counts (tiny models, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.deploy import export


@pytest.fixture()
def tiny(torch_mod):
    """Conv + BatchNorm + ReLU + pooling + flatten + linear: the patterns the course's models have."""
    nn = torch_mod.nn
    torch_mod.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    ).eval()
    with (
        torch_mod.no_grad()
    ):  # non-trivial BN statistics, so folding them really changes the conv weights
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, torch_mod.randn(2, 3, 8, 8)


def test_export_writes_checked_file_with_dynamic_batch(tiny, tmp_path):
    model, x = tiny
    rep = export.export_onnx(model, x, tmp_path / "m.onnx")
    assert rep.path.is_file() and rep.opset == 17
    assert export.io_shapes(rep.path) == {"input": ("batch", 3, 8, 8), "output": ("batch", 3)}
    assert (
        "Conv" in rep.op_counts and "BatchNormalization" not in rep.op_counts
    )  # folded by the exporter
    assert "nodes" in str(rep)


def test_export_rejects_wrong_rank_and_non_modules(tiny, tmp_path, torch_mod):
    model, x = tiny
    with pytest.raises(ValueError, match="rank 3"):
        export.export_onnx(model, x[0], tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        export.export_onnx(lambda t: t, x, tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="torch.Tensor"):
        export.export_onnx(model, x.numpy(), tmp_path / "m.onnx")


def test_unfolded_export_keeps_batchnorm_and_matches(tiny, tmp_path):
    model, x = tiny
    raw = export.export_and_verify(model, x, tmp_path / "raw.onnx", fold_constants=False)
    assert raw.op_counts.get("BatchNormalization") == 1
    assert raw.max_abs is not None and raw.max_abs < 1e-4 and model.training is False


def test_export_and_verify_restores_training_mode(tiny, tmp_path):
    model, x = tiny
    model.train()
    export.export_and_verify(model, x, tmp_path / "m.onnx")
    assert model.training


def test_simplify_folds_batchnorm_and_keeps_outputs(tiny, tmp_path):
    import onnxruntime as ort

    model, x = tiny
    raw = export.export_onnx(model, x, tmp_path / "raw.onnx", fold_constants=False)
    simple = export.simplify(raw.path, tmp_path / "simple.onnx")
    assert "BatchNormalization" not in simple.op_counts and "Identity" not in simple.op_counts
    assert sum(simple.op_counts.values()) < sum(raw.op_counts.values())
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(
        None, {"input": x.numpy()}
    )[0]  # noqa: E731
    np.testing.assert_allclose(run(simple.path), run(raw.path), atol=1e-5)


def test_op_count_table_and_domains(tiny, tmp_path):
    from helpers.deploy.runtimes import optimize_offline

    model, x = tiny
    raw = export.export_onnx(model, x, tmp_path / "raw.onnx", fold_constants=False)
    optimize_offline(raw.path, tmp_path / "ext.onnx", "extended")
    fused = export.op_counts(tmp_path / "ext.onnx", with_domain=True)
    assert any(k.startswith("com.microsoft") for k in fused), (
        fused
    )  # Conv+ReLU -> com.microsoft:FusedConv
    rows = export.op_count_table({"raw": raw.path, "extended": fused})
    assert rows[-1]["op"] == "total nodes" and rows[-1]["raw"] == sum(raw.op_counts.values())
    bn = next(r for r in rows if r["op"] == "BatchNormalization")
    assert bn["raw"] == 1 and bn["extended"] == 0
    with pytest.raises(ValueError, match="at least one"):
        export.op_count_table({})


def test_op_counts_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        export.op_counts(tmp_path / "missing.onnx")
    with pytest.raises(TypeError, match="ModelProto"):
        export.op_counts(42)


def test_rename_io_and_infer_shapes(tiny, tmp_path):
    model, x = tiny
    rep = export.export_onnx(model, x, tmp_path / "m.onnx", input_name="x0", output_name="y0")
    export.rename_io(rep.path, {"x0": "images", "y0": "logits"}, dst=tmp_path / "r.onnx")
    assert set(export.io_shapes(tmp_path / "r.onnx")) == {"images", "logits"}
    with pytest.raises(KeyError, match="not inputs or outputs"):
        export.rename_io(rep.path, {"nope": "x"})
    shapes = export.infer_shapes(tmp_path / "r.onnx")
    assert ("batch", 4, 8, 8) in shapes.values()  # the conv output, known before running anything


def test_export_oneflow_onnx_matches_oneflow(flow, tmp_path):
    nn = flow.nn
    flow.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    rep = export.export_oneflow_onnx(model, x, tmp_path / "of.onnx")
    assert rep.max_abs is not None and rep.max_abs < 1e-4
    assert export.io_shapes(rep.path) == {"input": (2, 3, 8, 8), "output": (2, 3)}
    with pytest.raises(ValueError, match="rank 3"):
        export.export_oneflow_onnx(model, x[0], tmp_path / "bad.onnx")
    with pytest.raises(TypeError, match="nn.Module or nn.Graph"):
        export.export_oneflow_onnx(lambda t: t, x, tmp_path / "bad.onnx")
