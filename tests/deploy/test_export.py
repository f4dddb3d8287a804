"""helpers.deploy.export: chapter 7's ONNX export and verification (saved from its page), op counts (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.deploy import export


@pytest.fixture()
def tiny(torch_mod, tiny_classifier):
    """The tests' tiny CNN: the patterns the course's models have (conv, BatchNorm, ...)."""
    model = tiny_classifier(width=4, classes=3, seed=0).eval()
    with (
        torch_mod.no_grad()
    ):  # non-trivial BN statistics, so folding them really changes the conv weights
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, torch_mod.randn(2, 3, 8, 8)


def test_export_writes_checked_file_with_dynamic_batch(tiny, tmp_path):
    model, x = tiny
    rep = export.export_onnx(model, x, tmp_path / "m.onnx")
    assert rep.path.is_file() and rep.opset == 18
    assert not list(tmp_path.glob("*.data"))  # one self-contained file: no external data
    import onnxruntime as ort

    sess = ort.InferenceSession(str(rep.path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.shape, out.name, out.shape) == (
        "input",
        ["batch", 3, 8, 8],
        "output",
        ["batch", 3],
    )
    assert sess.run(None, {"input": x.repeat(3, 1, 1, 1).numpy()})[0].shape == (6, 3)
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
    # torch.export takes a size of 1 as a constant: a dynamic batch needs two examples
    with pytest.raises(ValueError, match="at least 2"):
        export.export_onnx(model, x[:1], tmp_path / "m.onnx")
    one = export.export_onnx(model, x[:1], tmp_path / "one.onnx", dynamic_batch=False)
    assert one.path.is_file()


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


def test_op_count_table_and_domains(tiny, tmp_path):
    from helpers.deploy.runtimes import create_session

    model, x = tiny
    raw = export.export_onnx(model, x, tmp_path / "raw.onnx", fold_constants=False)
    create_session(
        raw.path,
        "cpu",
        optimization="extended",
        optimized_model_path=tmp_path / "ext.onnx",
        verbose=False,
    )
    fused = export.op_counts(tmp_path / "ext.onnx", with_domain=True)
    assert any(k.startswith("com.microsoft") for k in fused), (
        fused
    )  # Conv+ReLU -> com.microsoft:FusedConv
    rows = export.op_count_table({"raw": raw.path, "extended": tmp_path / "ext.onnx"})
    assert rows[-1]["op"] == "total nodes" and rows[-1]["raw"] == sum(raw.op_counts.values())
    bn = next(r for r in rows if r["op"] == "BatchNormalization")
    assert bn["raw"] == 1 and bn["extended"] == 0
    with pytest.raises(ValueError, match="at least one"):
        export.op_count_table({})


def test_op_counts_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        export.op_counts(tmp_path / "missing.onnx")


def test_graph_inputs_skip_initializers(tiny, tmp_path):
    import onnx

    model, x = tiny
    rep = export.export_onnx(model, x, tmp_path / "m.onnx", input_name="image")
    proto = onnx.load(str(rep.path))
    # an exporter that lists weights as graph inputs (old opsets did) must not confuse the reader
    proto.graph.input.extend(
        onnx.helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
        for i in proto.graph.initializer
    )
    onnx.save(proto, str(tmp_path / "listed.onnx"))
    assert len(proto.graph.input) > 1 and export.graph_inputs(tmp_path / "listed.onnx") == ["image"]
    with pytest.raises(FileNotFoundError):
        export.graph_inputs(tmp_path / "missing.onnx")


def test_verification_catches_a_wrong_export(tiny, tmp_path, monkeypatch, torch_mod):
    """export_and_verify really compares: a file that computes something else fails."""
    model, x = tiny
    real_capture = torch_mod.export.export

    def capture_other(m, *args, **kwargs):  # captures a model with different weights
        other = __import__("copy").deepcopy(m)
        with torch_mod.no_grad():
            other[-1].bias.add_(1.0)
        return real_capture(other, *args, **kwargs)

    monkeypatch.setattr(torch_mod.export, "export", capture_other)
    with pytest.raises(AssertionError, match="ONNX Runtime vs PyTorch"):
        export.export_and_verify(model, x, tmp_path / "wrong.onnx")


def test_verification_takes_the_precision_policys_tolerance(tiny, tmp_path, torch_mod):
    from helpers.core import precision

    model, x = tiny
    rep = export.export_and_verify(model, x, tmp_path / "m.onnx")
    with torch_mod.no_grad():
        want = model(x)
    # both sides in IEEE float32 on the CPU: the policy's float32 bound at the outputs' scale
    expected = precision.tolerance("fp32", scale=precision.output_scale(want))
    assert rep.tolerance == expected and "fp32 tolerance" in str(rep)
    assert rep.max_abs <= rep.tolerance.atol
    # the bound given is the bound used: one far below float32 rounding fails
    tight = precision.Tolerance("fp32", 0.0, 0.0, 2.0**-24, 0.0, 1.0)
    if rep.max_abs > 0:
        with pytest.raises(AssertionError, match="ONNX Runtime vs PyTorch"):
            export.export_and_verify(model, x, tmp_path / "t.onnx", tolerance=tight)


def test_quiet_exporter_hides_only_its_noise_and_restores() -> None:
    import logging
    import warnings

    log = logging.getLogger("torch.onnx._internal.exporter._schemas")
    before = log.level
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with export.quiet_exporter():
            assert log.level == logging.ERROR
            warnings.warn(
                "`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, stacklevel=1
            )
            warnings.warn("something else", FutureWarning, stacklevel=1)  # shown
    assert log.level == before
    assert [str(w.message) for w in seen] == ["something else"]


def test_numpy_bool_alias_is_scoped() -> None:
    """Inside the block ``np.bool`` is ``np.bool_``; afterwards NumPy is exactly as before."""
    before = "bool" in np.__dict__, np.__dict__.get("bool")
    with export.numpy_bool_alias():
        assert np.bool is np.bool_
    assert ("bool" in np.__dict__, np.__dict__.get("bool")) == before


def test_numpy_bool_alias_restores_on_error() -> None:
    """An exception inside the block still restores NumPy (no leaked global patch)."""
    before = "bool" in np.__dict__
    with pytest.raises(RuntimeError, match="inside"):
        with export.numpy_bool_alias():
            raise RuntimeError("inside")
    assert ("bool" in np.__dict__) == before
    if not before:  # NumPy 1.24-1.26: the alias is gone again, as NumPy ships it
        with pytest.raises(AttributeError):
            np.bool  # noqa: B018
