"""helpers.deploy.quantization: calibration readers, ONNX Runtime and NNCF INT8 quantization, accuracy (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.comparison import rowwise_cosine
from helpers.deploy import export, runtimes
from helpers.deploy import quantization as q


@pytest.fixture()
def tiny(torch_mod, tmp_path):
    nn = torch_mod.nn
    torch_mod.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 4),
    ).eval()
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((16, 3, 8, 8)).astype(np.float32)
    path = export.export_onnx(model, torch_mod.from_numpy(calib[:2]), tmp_path / "tiny.onnx").path
    return model, path, calib


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (np.zeros((0, 3, 8, 8), np.float32), ValueError, "empty"),
        (np.zeros((4, 3, 8, 8), np.uint8), TypeError, "float"),
        (np.full((2, 3, 8, 8), np.nan, np.float32), ValueError, "NaN"),
        ([[1.0]], TypeError, "NumPy array"),
    ],
)
def test_bad_calibration_sets_are_clear_errors(tiny, tmp_path, bad, err, match):
    _, path, _ = tiny
    with pytest.raises(err, match=match):
        q.quantize_onnx(path, tmp_path / "q.onnx", bad)
    with pytest.raises(err, match=match):
        q.quantize_openvino(path, bad)
    with pytest.raises(err, match=match):
        q.calibration_reader(bad)


def test_calibration_reader_batches_and_rewinds():
    from onnxruntime.quantization import CalibrationDataReader

    reader = q.calibration_reader(np.ones((10, 3, 4, 4), np.float32), "x", batch_size=4)
    assert isinstance(reader, CalibrationDataReader) and len(reader) == 3
    sizes = [len(b["x"]) for b in iter(reader.get_next, None)]
    assert sizes == [4, 4, 2]
    reader.rewind()
    assert reader.get_next()["x"].shape == (4, 3, 4, 4)
    with pytest.raises(ValueError, match="batch_size"):
        q.calibration_reader(np.ones((2, 3, 4, 4), np.float32), batch_size=0)


@pytest.mark.parametrize("per_channel", [True, False])
def test_quantize_onnx_makes_a_close_qdq_model(tiny, tmp_path, per_channel):
    model, path, calib = tiny
    rep = q.quantize_onnx(path, tmp_path / "q.onnx", calib, per_channel=per_channel)
    assert rep.op_counts["QuantizeLinear"] > 0 and rep.op_counts["DequantizeLinear"] > 0
    assert rep.calibration_size == 16 and rep.per_channel is per_channel and "per-" in str(rep)
    assert (tmp_path / "q.pre.onnx").is_file()  # quant_pre_process ran first
    fp32 = q.predict(model, calib)
    int8 = q.predict(runtimes.create_session(rep.path, verbose=False), calib)
    # 8-bit activations and weights: outputs stay strongly correlated with fp32, not bit-identical
    assert rowwise_cosine(int8, fp32).min() > 0.98
    assert not np.array_equal(int8, fp32)


def test_quantize_onnx_bad_settings(tiny, tmp_path):
    _, path, calib = tiny
    with pytest.raises(ValueError, match="activation"):
        q.quantize_onnx(path, tmp_path / "q.onnx", calib, activation="int4")
    with pytest.raises(ValueError, match="method"):
        q.quantize_onnx(path, tmp_path / "q.onnx", calib, method="magic")
    with pytest.raises(FileNotFoundError):
        q.quantize_onnx(tmp_path / "missing.onnx", tmp_path / "q.onnx", calib)


def test_quantize_openvino_runs_int8(tiny, tmp_path):
    model, path, calib = tiny
    qmodel, rep = q.quantize_openvino(path, calib, dst=tmp_path / "q.xml")
    assert rep.op_counts["FakeQuantize"] > 0 and (tmp_path / "q.xml").is_file()
    runner = runtimes.openvino_model(qmodel, precision="f32", verbose=False)
    assert runner.precision.startswith("int8")
    assert rowwise_cosine(runner.run(calib), q.predict(model, calib)).min() > 0.98
    with pytest.raises(ValueError, match="preset"):
        q.quantize_openvino(path, calib, preset="fastest")
    with pytest.raises(TypeError, match="openvino.Model"):
        q.quantize_openvino(3.0, calib)


def test_accuracy_predict_and_cosine():
    logits = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0]]
    x = np.zeros((5, 1), np.float32)
    fn = lambda b: logits[: len(b)] if len(b) == 5 else logits[np.arange(len(b))]  # noqa: E731
    assert q.accuracy(fn, x, [0, 1, 2, 3, 0], batch_size=5) == 1.0
    assert q.accuracy(fn, x, [0, 1, 2, 3, 1], batch_size=5) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="labels"):
        q.accuracy(fn, x, [0, 1])
    with pytest.raises(ValueError, match="1-D"):
        q.accuracy(fn, x, np.zeros((5, 2)))
    with pytest.raises(TypeError, match="cannot predict"):
        q.predict(42, x)


def test_predict_restores_training_mode(tiny):
    model, _, calib = tiny
    model.train()
    q.predict(model, calib[:2])
    assert model.training
