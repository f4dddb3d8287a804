"""helpers.deploy.quantization: chapter 8's calibration reader and ONNX Runtime QDQ quantization (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.comparison import nearest_neighbour_agreement
from helpers.deploy import export, runtimes
from helpers.deploy import quantization as q
from helpers.workload.predict import predict_batched


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
    # a per-image brightness and colour shift, so that the pooled outputs differ between images
    # (with zero-mean noise alone they would all sit near the model's bias)
    shift = rng.normal(scale=2.0, size=(16, 3, 1, 1))
    calib = (rng.standard_normal((16, 3, 8, 8)) + shift).astype(np.float32)
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
        q.ArrayCalibrationReader(bad)


def test_calibration_reader_batches_and_rewinds():
    from onnxruntime.quantization import CalibrationDataReader

    reader = q.ArrayCalibrationReader(np.ones((10, 3, 4, 4), np.float32), "x", batch_size=4)
    assert isinstance(reader, CalibrationDataReader) and len(reader) == 3
    sizes = [len(b["x"]) for b in iter(reader.get_next, None)]
    assert sizes == [4, 4, 2]
    reader.rewind()
    assert reader.get_next()["x"].shape == (4, 3, 4, 4)
    with pytest.raises(ValueError, match="batch_size"):
        q.ArrayCalibrationReader(np.ones((2, 3, 4, 4), np.float32), batch_size=0)


@pytest.mark.parametrize(
    "per_channel, activation, symmetric", [(True, "uint8", False), (False, "int8", True)]
)
def test_quantize_onnx_makes_a_close_qdq_model(tiny, tmp_path, per_channel, activation, symmetric):
    model, path, calib = tiny
    rep = q.quantize_onnx(
        path,
        tmp_path / "q.onnx",
        calib,
        per_channel=per_channel,
        activation=activation,
        symmetric=symmetric,
    )
    assert rep.op_counts["QuantizeLinear"] > 0 and rep.op_counts["DequantizeLinear"] > 0
    assert rep.calibration_size == 16 and rep.per_channel is per_channel and "per-" in str(rep)
    assert (tmp_path / "q.pre.onnx").is_file()  # quant_pre_process ran first
    fp32 = predict_batched(model, calib)
    runner = runtimes.create_session(rep.path, verbose=False)
    # the session states its arithmetic: the precision policy's int8, whatever the provider
    assert runtimes.is_quantized(rep.path) and not runtimes.is_quantized(path)
    assert runner.math_mode == runner.precision == "int8"
    int8 = predict_batched(runner, calib)
    assert not np.array_equal(int8, fp32)  # 8-bit rounding happened
    # and it still computes the same function: each input's INT8 output is nearest to its own fp32
    # output (a model that ignored its input, or mixed up samples, would fail this)
    assert nearest_neighbour_agreement(int8 - int8.mean(0), fp32 - fp32.mean(0)) == 1.0


def test_quantize_onnx_types_and_zero_points(tiny, tmp_path):
    import onnx
    from onnx import numpy_helper

    _, path, calib = tiny
    for activation, symmetric, dtype in (("uint8", False, np.uint8), ("int8", True, np.int8)):
        rep = q.quantize_onnx(
            path, tmp_path / f"{activation}.onnx", calib, activation=activation, symmetric=symmetric
        )
        proto = onnx.load(str(rep.path))
        inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
        zps = [
            inits[n.input[2]] for n in proto.graph.node if n.op_type == "QuantizeLinear"
        ]  # activations are what QuantizeLinear nodes produce
        assert zps and all(z.dtype == dtype for z in zps)
        if symmetric:
            assert all(np.all(z == 0) for z in zps)  # what TensorRT needs


def test_quantize_onnx_bad_settings(tiny, tmp_path):
    _, path, calib = tiny
    with pytest.raises(ValueError, match="activation"):
        q.quantize_onnx(path, tmp_path / "q.onnx", calib, activation="int4")
    with pytest.raises(ValueError, match="method"):
        q.quantize_onnx(path, tmp_path / "q.onnx", calib, method="magic")
    with pytest.raises(FileNotFoundError):
        q.quantize_onnx(tmp_path / "missing.onnx", tmp_path / "q.onnx", calib)


def test_check_settings_and_report_rows(tiny, tmp_path):
    from onnxruntime.quantization import CalibrationMethod, QuantType

    assert q.check_settings("int8", "percentile") == (QuantType.QInt8, CalibrationMethod.Percentile)
    with pytest.raises(ValueError, match="uint8, int8"):
        q.check_settings("int4", "minmax")
    _, path, calib = tiny
    row = q.quantize_onnx(path, tmp_path / "q.onnx", calib).as_row()
    assert row["file"] == "q.onnx" and row["calibration images"] == 16
    assert row["weights"].startswith("per-channel") and row["Q/DQ nodes"] > 0


def _weight_peak(path) -> int:
    """The largest magnitude of a quantized model's stored int8 convolution weights."""
    import onnx
    from onnx import numpy_helper

    ints = [
        numpy_helper.to_array(i)
        for i in onnx.load(str(path)).graph.initializer
        if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 4  # conv weights
    ]
    return max(int(np.abs(w.astype(np.int16)).max()) for w in ints)


@pytest.mark.parametrize("saturates", [True, False])
def test_reduce_range_follows_the_cpu_unless_given(tiny, tmp_path, monkeypatch, saturates):
    """Where int8 kernels saturate (x86 without VNNI) the symmetric weights get 7 bits (at most
    64 in magnitude); elsewhere the full 127. An explicit ``reduce_range`` wins either way."""
    from helpers.core import hardware

    monkeypatch.setattr(hardware, "int8_saturates", lambda: saturates)
    _, path, calib = tiny
    auto = q.quantize_onnx(path, tmp_path / "auto.onnx", calib)
    assert auto.settings["reduce_range"] is saturates
    assert auto.as_row()["weights"].endswith(", 7-bit") is saturates
    assert (_weight_peak(auto.path) <= 64) is saturates  # 8 bits reach 127
    forced = q.quantize_onnx(path, tmp_path / "f.onnx", calib, reduce_range=not saturates)
    assert forced.settings["reduce_range"] is (not saturates)
    assert (_weight_peak(forced.path) <= 64) is (not saturates)


def test_quantize_onnx_per_tensor_weights_have_one_scale(tiny, tmp_path):
    """Catches M21 (``per_channel`` not passed on to quantize_static): per-channel convolution
    weights get one scale per output channel, per-tensor ones a single scale."""
    import onnx
    from onnx import numpy_helper

    _, path, calib = tiny
    for per_channel in (True, False):
        rep = q.quantize_onnx(
            path, tmp_path / f"pc{per_channel}.onnx", calib, per_channel=per_channel
        )
        proto = onnx.load(str(rep.path))
        inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
        sizes = [
            inits[n.input[1]].size
            for n in proto.graph.node
            if n.op_type == "DequantizeLinear" and getattr(inits.get(n.input[0]), "ndim", 0) == 4
        ]
        assert len(sizes) == 2 and all((s > 1) == per_channel for s in sizes), sizes


def _activation_scales(path) -> list[float]:
    """The scales of a QDQ model's activations: the QuantizeLinear nodes' second inputs."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    return [float(inits[n.input[1]]) for n in proto.graph.node if n.op_type == "QuantizeLinear"]


def test_the_calibration_method_reaches_the_activation_scales(tiny, tmp_path):
    """The method the report names is the one that chose the ranges: a percentile calibration
    clips the extremes a min-max one keeps, so its scales come out smaller (read from the file)."""
    _, path, calib = tiny
    reps = {
        method: q.quantize_onnx(path, tmp_path / f"{method}.onnx", calib, method=method)
        for method in ("minmax", "percentile")
    }
    scales = {method: _activation_scales(rep.path) for method, rep in reps.items()}
    assert reps["percentile"].settings["method"] == "percentile"
    assert len(scales["minmax"]) == len(scales["percentile"]) > 0
    assert all(p <= m for p, m in zip(scales["percentile"], scales["minmax"]))
    assert scales["percentile"] != scales["minmax"]
