"""helpers.deploy.runtimes: provider choice, ONNX Runtime sessions, OpenVINO compilation (tiny models, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.environment import has_cuda
from helpers.deploy import export, runtimes
from helpers.measure.measurement import Measurement


def test_auto_picks_best_usable_provider():
    usable = runtimes.usable_providers()
    assert usable[-1] == "cpu"
    assert runtimes.pick_provider("auto") == usable[0]
    assert runtimes.pick_provider(" CPU ") == "cpu"


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
    with pytest.raises(runtimes.ProviderUnavailableError, match="not installed"):
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


def test_session_options_validate(tmp_path, tiny_onnx):
    with pytest.raises(ValueError, match="optimisation level"):
        runtimes.create_session(tiny_onnx[0], optimization="max")
    with pytest.raises(ValueError, match="intra_op_threads"):
        runtimes.create_session(tiny_onnx[0], intra_op_threads=0)
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


def test_openvino_settings_are_read_back_from_the_compiled_model(tiny_onnx):
    """Threads, the LATENCY hint and precision as the compiled model has them."""
    import openvino as ov

    path, _, _ = tiny_onnx
    for threads in (1, 2):
        runner = runtimes.openvino_model(path, precision="f32", threads=threads, verbose=False)
        compiled = runner.handle
        assert compiled.get_property("INFERENCE_NUM_THREADS") == runner.threads == threads
        assert str(compiled.get_property("PERFORMANCE_HINT")) == "LATENCY"
        assert runtimes.ov_type_name(compiled.get_property("INFERENCE_PRECISION_HINT")) in (
            "f32",
            "float32",
        )
    if "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        bf16 = runtimes.openvino_model(path, precision="bf16", threads=1, verbose=False)
        assert runtimes.ov_type_name(bf16.handle.get_property("INFERENCE_PRECISION_HINT")) in (
            "bf16",
            "bfloat16",
        )


def test_openvino_runner_is_safe_to_call_from_threads(tiny_onnx):
    """Chapter 10's pipeline calls one runner from two threads: each must get its own answer."""
    import threading

    path, x, _ = tiny_onnx
    runner = runtimes.openvino_model(path, precision="f32", threads=1, verbose=False)
    inputs = [x * (k + 1) for k in range(4)]  # a different input per thread
    alone = [runner.run(xi) for xi in inputs]
    start, errors = threading.Barrier(len(inputs)), []

    def work(k):
        try:
            start.wait()
            for _ in range(200):
                np.testing.assert_array_equal(runner.run(inputs[k]), alone[k])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock)"
    assert not errors, errors[0]


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
    with pytest.raises(ValueError, match="threads"):
        runtimes.openvino_model(path, threads=0)
    with pytest.raises(ValueError, match="streams"):
        runtimes.openvino_model(path, threads=2, streams=3)
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


# ------------------------------------------------------------------ math modes, I/O binding, tables
def test_ort_math_mode_follows_provider_and_options(monkeypatch):
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setattr(runtimes, "gpu_tf32_capable", lambda index: True)  # Ampere+
    assert runtimes.ort_math_mode("cpu") == "fp32"
    assert runtimes.ort_math_mode("cpu", {"use_tf32": 1}) == "fp32"
    # the CUDA EP allows TF32 by default (use_tf32 defaults to true); 0 gives IEEE float32
    assert runtimes.ort_math_mode("cuda") == "tf32"
    for off in (0, "0", False, "false", "False"):
        assert runtimes.ort_math_mode("cuda", {"use_tf32": off}) == "fp32"
    trt = runtimes.ort_math_mode
    assert trt("tensorrt") == "tf32"  # TensorRT's builder allows TF32 by default
    assert trt("tensorrt", {"trt_fp16_enable": True}) == "fp16"
    assert trt("tensorrt", {"trt_fp16_enable": "True", "trt_int8_enable": "1"}) == "int8"
    for provider in ("cpu", "cuda", "tensorrt"):  # a quantized graph: int8, the coarsest mode
        assert runtimes.ort_math_mode(provider, quantized=True) == "int8"
    with pytest.raises(ValueError, match="unknown provider"):
        runtimes.ort_math_mode("openvino")
    monkeypatch.setattr(runtimes, "gpu_tf32_capable", lambda index: False)
    assert runtimes.ort_math_mode("cuda", {"use_tf32": "1"}) == "fp32"  # pre-Ampere


def test_nvidia_tf32_override_turns_gpu_tf32_off(monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert runtimes.ort_math_mode("cuda") == "fp32"
    assert runtimes.ort_math_mode("tensorrt") == "fp32"


def test_runner_states_device_math_mode_and_threads(tiny_onnx):
    path, _, _ = tiny_onnx
    runner = runtimes.create_session(path, "cpu", intra_op_threads=1, verbose=False)
    assert (runner.device, runner.math_mode, runner.threads, runner.on_device) == (
        "cpu",
        "fp32",
        1,
        False,
    )
    assert "cpu" in str(runner) and "1 threads" in str(runner)
    ov = runtimes.openvino_model(path, precision="f32", threads=1, verbose=False)
    assert (ov.device, ov.math_mode, ov.threads, ov.on_device) == ("cpu", "fp32", 1, False)


def test_create_session_applies_threads_wait_policy_and_optimisation(tiny_onnx, monkeypatch):
    """Read back from the session ONNX Runtime built, not from the runner's label (M11 of the
    mutation sample: threads never passed on while the runner still reported them)."""
    path, _, _ = tiny_onnx
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # so spinning=True differs from the default
    for intra, inter, spinning, level in ((1, 1, False, "basic"), (2, 3, True, "extended")):
        runner = runtimes.create_session(
            path,
            "cpu",
            intra_op_threads=intra,
            inter_op_threads=inter,
            spinning=spinning,
            optimization=level,
            verbose=False,
        )
        opts = runner.handle.get_session_options()
        assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (intra, inter)
        for key in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
            assert opts.get_session_config_entry(key) == ("1" if spinning else "0")
        want = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}[level]
        assert opts.graph_optimization_level.name == want
        assert runner.threads == intra
    # left to ONNX Runtime: its default threads (0 in the options), stated as such; the wait
    # policy follows PyTorch's (OMP_WAIT_POLICY=PASSIVE: no spinning)
    default = runtimes.create_session(path, "cpu", verbose=False)
    opts = default.handle.get_session_options()
    assert opts.intra_op_num_threads == 0 and default.threads == "default"
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    monkeypatch.delenv("OMP_WAIT_POLICY")  # PyTorch's threads spin: so do the session's
    spins = runtimes.create_session(path, "cpu", verbose=False).handle.get_session_options()
    assert spins.get_session_config_entry("session.inter_op.allow_spinning") == "1"


class _FakeOrtSession:
    """Stands in for ``onnxruntime.InferenceSession`` on a machine without a GPU: records what
    it was given and reports the first provider as started."""

    made: list = []

    def __init__(self, path, sess_options=None, providers=()):
        self.path, self.options, self.providers = path, sess_options, list(providers)
        _FakeOrtSession.made.append(self)

    def get_providers(self):
        return [p if isinstance(p, str) else p[0] for p in self.providers]

    def get_session_options(self):
        return self.options

    def get_inputs(self):
        from types import SimpleNamespace

        return [SimpleNamespace(name="input", shape=[None, 3, 8, 8])]

    def get_outputs(self):
        from types import SimpleNamespace

        return [SimpleNamespace(name="output", shape=[None, 4])]


def test_gpu_sessions_get_their_provider_options_device_and_threads(tiny_onnx, monkeypatch):
    """The GPU path without a GPU: the options given for CUDA or TensorRT reach that provider
    (and only it), and the runner's device and math mode are derived from what was passed."""
    import onnxruntime as ort

    path, _, _ = tiny_onnx
    monkeypatch.setattr(
        runtimes, "provider_status", lambda: dict.fromkeys(runtimes.ORT_PROVIDERS, "usable")
    )
    monkeypatch.setattr(ort, "preload_dlls", lambda: None, raising=False)
    monkeypatch.setattr(ort, "InferenceSession", _FakeOrtSession)
    _FakeOrtSession.made = []
    cuda = runtimes.create_session(
        path,
        "cuda",
        provider_options={"use_tf32": 0, "device_id": 1},
        intra_op_threads=2,
        verbose=False,
    )
    sess = _FakeOrtSession.made[-1]
    assert sess.providers == [
        ("CUDAExecutionProvider", {"use_tf32": 0, "device_id": 1}),
        "CPUExecutionProvider",  # the fallback for unsupported ops gets no GPU options
    ]
    assert (cuda.device, cuda.math_mode, cuda.on_device) == ("cuda:1", "fp32", True)
    assert sess.options.intra_op_num_threads == 2 and cuda.threads == 2
    trt = runtimes.create_session(
        path,
        "tensorrt",
        provider_options={"trt_fp16_enable": True},
        trt_cache_dir=path.parent,
        verbose=False,
    )
    name, opts = _FakeOrtSession.made[-1].providers[0]
    assert name == "TensorrtExecutionProvider" and opts["trt_fp16_enable"] == "True"
    assert opts["trt_engine_cache_path"] == str(path.parent) and trt.math_mode == "fp16"
    assert _FakeOrtSession.made[-1].providers[1:] == [
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]


def test_skip_without_tensorrt_prints_one_line_naming_why(monkeypatch, capsys):
    monkeypatch.setattr(
        runtimes,
        "provider_status",
        lambda: {"tensorrt": "no TensorRT runtime library", "cuda": "usable", "cpu": "usable"},
    )
    assert runtimes.skip_without_tensorrt("TensorRT fp16") is True
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no TensorRT runtime library" in out[0] and "TensorRT fp16" in out[0]
    monkeypatch.setattr(
        runtimes,
        "provider_status",
        lambda: {"tensorrt": "usable", "cuda": "usable", "cpu": "usable"},
    )
    assert runtimes.skip_without_tensorrt("TensorRT fp16") is False
    assert capsys.readouterr().out == ""


@pytest.mark.skipif(has_cuda(), reason="checks the skip line on a machine without a GPU")
def test_tensorrt_status_without_gpu_names_the_gpu(capsys):
    assert runtimes.skip_without_tensorrt("TensorRT INT8") is True
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert "no CUDA GPU" in line or "not in this onnxruntime build" in line


def test_missing_tensorrt_libraries_point_at_make_setup(monkeypatch):
    monkeypatch.setattr(runtimes, "has_cuda", lambda: True)
    monkeypatch.setattr(runtimes, "_tensorrt_loadable", lambda: False)
    why = runtimes.provider_status()["tensorrt"]
    assert "libnvinfer" in why and "make setup GPU=1" in why and "tensorrt-cu12" in why
