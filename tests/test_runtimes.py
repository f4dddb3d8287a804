"""helpers.deploy.runtimes: provider choice, ONNX Runtime sessions, OpenVINO compilation (tiny models, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.benchmarking import Measurement
from helpers.core.environment import has_cuda
from helpers.deploy import export, runtimes


@pytest.fixture()
def tiny_onnx(torch_mod, tmp_path):
    nn = torch_mod.nn
    torch_mod.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).eval()
    x = torch_mod.randn(2, 3, 8, 8)
    path = export.export_onnx(model, x, tmp_path / "tiny.onnx", fold_constants=False).path
    with torch_mod.no_grad():
        want = model(x).numpy()
    return path, x.numpy(), want


def test_auto_picks_best_usable_provider():
    usable = runtimes.usable_providers()
    assert usable[-1] == "cpu"
    assert runtimes.pick_provider("auto") == usable[0]
    assert (
        runtimes.pick_provider("CPUExecutionProvider") == "cpu"
    )  # ONNX Runtime's own names work too


def test_preference_order_is_tensorrt_cuda_cpu(monkeypatch):
    monkeypatch.setattr(
        runtimes,
        "provider_status",
        lambda: {"tensorrt": "usable", "cuda": "usable", "cpu": "usable"},
    )
    assert runtimes.pick_provider("auto") == "tensorrt"
    monkeypatch.setattr(
        runtimes,
        "provider_status",
        lambda: {"tensorrt": "no libnvinfer", "cuda": "usable", "cpu": "usable"},
    )
    assert runtimes.pick_provider("auto") == "cuda"
    with pytest.raises(runtimes.ProviderUnavailableError, match="no libnvinfer"):
        runtimes.pick_provider("tensorrt")


def test_unknown_or_uninstalled_provider_is_a_clear_error():
    with pytest.raises(runtimes.ProviderUnavailableError, match="not installed"):
        runtimes.pick_provider("openvino")  # the OpenVINO EP is not in the onnxruntime-gpu wheel
    with pytest.raises(TypeError):
        runtimes.pick_provider(None)  # type: ignore[arg-type]


@pytest.mark.skipif(has_cuda(), reason="checks the error on a machine without a GPU")
def test_gpu_provider_without_gpu_is_a_clear_error(tiny_onnx):
    path, _, _ = tiny_onnx
    for name in ("cuda", "tensorrt"):
        with pytest.raises(runtimes.ProviderUnavailableError, match="no CUDA GPU"):
            runtimes.create_session(path, name)
    rows = runtimes.describe_providers()
    assert [r["provider"] for r in rows] == ["tensorrt", "cuda", "cpu"] and rows[-1][
        "here"
    ] == "usable"


def test_session_runs_matches_and_says_what_it_picked(tiny_onnx, capsys):
    path, x, want = tiny_onnx
    runner = runtimes.create_session(path, "cpu", intra_op_threads=1)
    assert "picked CPUExecutionProvider" in capsys.readouterr().out
    assert runner.framework == "onnxruntime" and runner.precision == "fp32"
    np.testing.assert_allclose(runner.run(x), want, atol=1e-5)
    np.testing.assert_allclose(
        runner(x.astype(np.float64)), want, atol=1e-5
    )  # cast to float32 on the way in
    m = runner.benchmark(x, warmup=1, repeats=2)
    assert isinstance(m, Measurement) and m.items == 2 and m.meta["precision"] == "fp32"


def test_runner_rejects_bad_inputs(tiny_onnx):
    path, x, _ = tiny_onnx
    runner = runtimes.create_session(path, verbose=False)
    with pytest.raises(ValueError, match="rank 3"):
        runner.run(x[0])
    with pytest.raises(TypeError, match="NumPy array"):
        runner.run([1, 2, 3])


def test_session_options_validate(tmp_path):
    with pytest.raises(ValueError, match="optimisation level"):
        runtimes.session_options(optimization="max")
    with pytest.raises(ValueError, match="intra_op_threads"):
        runtimes.session_options(intra_op_threads=0)
    with pytest.raises(FileNotFoundError):
        runtimes.create_session(tmp_path / "missing.onnx")


def test_optimisation_levels_shrink_the_graph(tiny_onnx, tmp_path):
    path, _, _ = tiny_onnx
    sizes = {}
    for level in ("disable", "basic", "extended"):
        saved = tmp_path / f"{level}.onnx"
        runtimes.create_session(
            path, "cpu", optimization=level, optimized_model_path=saved, verbose=False
        )
        sizes[level] = sum(export.op_counts(saved).values())
    assert sizes["disable"] > sizes["basic"] > sizes["extended"], sizes


def test_openvino_f32_matches_and_reports_precision(tiny_onnx, capsys):
    path, x, want = tiny_onnx
    runner = runtimes.openvino_model(path, precision="f32", threads=1)
    assert "INFERENCE_PRECISION_HINT=f32" in capsys.readouterr().out
    assert runner.framework == "openvino" and runner.precision == "f32"
    assert runner.info["precision_hint"] in ("f32", "float32")
    np.testing.assert_allclose(runner.run(x), want, atol=1e-4)
    assert all(p != "bf16" for (_, p) in runner.info["runtime_precisions"])


def test_openvino_bf16_really_runs_bf16(tiny_onnx):
    import openvino as ov

    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        pytest.skip("this CPU has no bf16 support")
    path, x, want = tiny_onnx
    runner = runtimes.openvino_model(path, precision="bf16", verbose=False)
    assert any(
        p == "bf16" for (layer, p) in runner.info["runtime_precisions"] if layer == "Convolution"
    )
    # bf16 keeps 8 mantissa bits: ~1e-2 relative error on outputs of size ~1
    np.testing.assert_allclose(runner.run(x), want, atol=5e-2)


def test_openvino_bad_arguments(tiny_onnx):
    path, _, _ = tiny_onnx
    with pytest.raises(ValueError, match="precision"):
        runtimes.openvino_model(path, precision="int4")
    with pytest.raises(ValueError, match="performance_hint"):
        runtimes.openvino_model(path, performance_hint="FAST")
    with pytest.raises(TypeError, match="openvino.Model"):
        runtimes.openvino_model(42)
    import openvino as ov

    if "GPU" not in ov.Core().available_devices:
        with pytest.raises(runtimes.ProviderUnavailableError, match="not available"):
            runtimes.openvino_model(path, device="GPU")


def test_trt_profile_covers_the_batch_range(tiny_onnx):
    path, _, _ = tiny_onnx
    prof = runtimes.trt_profile(path, 1, 4, 16)
    assert prof == {
        "trt_profile_min_shapes": "input:1x3x8x8",
        "trt_profile_opt_shapes": "input:4x3x8x8",
        "trt_profile_max_shapes": "input:16x3x8x8",
    }
    with pytest.raises(ValueError, match="min_batch"):
        runtimes.trt_profile(path, 4, 2, 8)
