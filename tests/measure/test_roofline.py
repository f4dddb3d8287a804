"""helpers.measure.roofline: matmul peak, FLOP counting and percent of peak."""

from __future__ import annotations

import pytest

from helpers.measure import roofline


def test_count_flops_of_linear(torch_mod):
    batch, n_in, n_out = 4, 16, 8
    layer = torch_mod.nn.Linear(n_in, n_out)
    assert roofline.count_flops(layer, torch_mod.randn(batch, n_in)) == 2 * n_in * n_out * batch


def test_count_flops_scales_with_batch_and_rejects_non_torch(torch_mod):
    net = torch_mod.nn.Sequential(
        torch_mod.nn.Linear(8, 8), torch_mod.nn.ReLU(), torch_mod.nn.Linear(8, 2)
    )
    one = roofline.count_flops(net, torch_mod.randn(1, 8))
    assert one == 2 * (8 * 8 + 8 * 2)
    assert roofline.count_flops(net, torch_mod.randn(3, 8)) == 3 * one
    with pytest.raises(TypeError, match="torch.nn.Module"):
        roofline.count_flops(lambda x: x, torch_mod.randn(1))


def test_matmul_peak_small_n_is_positive(torch_mod):
    gflops = roofline.matmul_peak_gflops(n=64, repeats=2, device="cpu")
    assert gflops > 0


def test_matmul_peak_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        roofline.matmul_peak_gflops(dtype="int8", n=64)
    with pytest.raises(ValueError, match="n must"):
        roofline.matmul_peak_gflops(n=8)
    with pytest.raises(ValueError, match="repeats must"):
        roofline.matmul_peak_gflops(n=64, repeats=0)
    with pytest.raises(ValueError, match="float16"):
        roofline.matmul_peak_gflops(dtype="float16", n=64, device="cpu")
    with pytest.raises(ValueError, match="tf32=True"):
        roofline.matmul_peak_gflops(n=64, device="cpu", tf32=True)
    with pytest.raises(ValueError, match="tf32=True"):
        roofline.matmul_peak_gflops(dtype="bfloat16", n=64, device="cpu", tf32=True)


def test_fp32_peak_runs_with_tf32_off_and_restores_the_settings(torch_mod, monkeypatch):
    from helpers.core import precision

    seen = []
    real_loop = roofline.time_loop

    def spying_loop(fn, **kw):
        # inside the measurement: PyTorch in IEEE float32 (no TF32 for matmuls)
        seen.append(torch_mod.get_float32_matmul_precision())
        return real_loop(fn, **kw)

    monkeypatch.setattr(roofline, "time_loop", spying_loop)
    before = precision.set_tf32(True)  # a notebook that allowed TF32 ...
    try:
        roofline.matmul_peak_gflops("float32", n=32, repeats=1, device="cpu")
        assert seen == ["highest"]
        assert torch_mod.get_float32_matmul_precision() == "high"  # ... keeps its setting
    finally:
        precision.restore_tf32(before)


def test_ceilings_on_a_cpu_are_fp32_bf16_and_int8_keyed_by_math_mode(torch_mod):
    from helpers.core import precision

    peaks = roofline.ceilings("cpu", n=32, repeats=1)
    int8 = ["int8"] if roofline.hardware.has_int8_dot_product() else []
    assert list(peaks) == ["fp32", "bf16", *int8] and all(v > 0 for v in peaks.values())
    # the ceiling of the mode a CPU model runs in is there to divide by
    assert precision.torch_math_mode("cpu") in peaks


@pytest.mark.parametrize("kernel", roofline.INT8_KERNELS)
def test_int8_matmul_peak_small_n_is_positive(torch_mod, kernel):
    assert roofline.int8_matmul_peak_gops(n=64, repeats=2, kernel=kernel) > 0


def test_int8_matmul_peak_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kernel"):
        roofline.int8_matmul_peak_gops(n=64, kernel="numpy")
    with pytest.raises(ValueError, match="multiple of 8"):
        roofline.int8_matmul_peak_gops(n=60)
    with pytest.raises(ValueError, match="repeats"):
        roofline.int8_matmul_peak_gops(n=64, repeats=0)


@pytest.mark.parametrize("vnni", [True, False])
def test_cpu_ceilings_have_int8_exactly_with_dot_product_instructions(torch_mod, monkeypatch, vnni):
    """The int8 ceiling appears where the CPU has VNNI/AMX, and is then the best of both kernels."""
    monkeypatch.setattr(roofline.hardware, "has_int8_dot_product", lambda: vnni)
    calls = []

    def fake_int8(n, repeats, kernel):
        calls.append(kernel)
        return {"onednn": 100.0, "ort": 300.0, "openvino": 200.0}[kernel]

    monkeypatch.setattr(roofline, "int8_matmul_peak_gops", fake_int8)
    peaks = roofline.ceilings("cpu", n=64, repeats=1)
    assert {"fp32", "bf16"} <= set(peaks)
    if vnni:
        assert peaks["int8"] == 300.0 and sorted(calls) == ["onednn", "openvino", "ort"]
    else:
        assert "int8" not in peaks and not calls


def test_conv1x1_peak_small_n_is_positive_and_checks_arguments(torch_mod):
    assert roofline.conv1x1_peak_gflops("float32", n=16, repeats=1) > 0
    with pytest.raises(ValueError, match="dtype"):
        roofline.conv1x1_peak_gflops("int8")
    with pytest.raises(ValueError, match="n must"):
        roofline.conv1x1_peak_gflops(n=8)


def test_cpu_fp32_ceiling_is_the_better_of_matmul_and_conv(torch_mod, monkeypatch):
    """A BLAS matmul slower than the convolutions must not set the fp32 ceiling."""
    monkeypatch.setattr(roofline.hardware, "has_int8_dot_product", lambda: False)
    monkeypatch.setattr(roofline, "matmul_peak_gflops", lambda dtype, *a, **k: 50.0)
    monkeypatch.setattr(
        roofline,
        "conv1x1_peak_gflops",
        lambda dtype, *a: {"float32": 140.0, "bfloat16": 20.0}[dtype],
    )
    assert roofline.ceilings("cpu", n=32, repeats=1) == {"fp32": 140.0, "bf16": 50.0}


@pytest.mark.parametrize("native", [True, False])
def test_an_emulated_bf16_matmul_is_measured_small(torch_mod, monkeypatch, native):
    """Without bf16 instructions the bf16 matmul is timed at n <= 512 (an emulated one slows
    down as it grows: minutes a call at 2048); with them, at the size asked for."""
    monkeypatch.setattr(roofline.hardware, "has_bf16_instructions", lambda: native)
    monkeypatch.setattr(roofline.hardware, "has_int8_dot_product", lambda: False)
    sizes = {}

    def fake_matmul(dtype, n, *a, **k):
        sizes[dtype] = n
        return 10.0

    monkeypatch.setattr(roofline, "matmul_peak_gflops", fake_matmul)
    monkeypatch.setattr(roofline, "conv1x1_peak_gflops", lambda dtype, n, *a: 20.0)
    assert roofline.ceilings("cpu", n=2048, repeats=1) == {"fp32": 20.0, "bf16": 20.0}
    assert sizes == {"float32": 2048, "bfloat16": 2048 if native else 512}
