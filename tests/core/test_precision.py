"""The precision policy (helpers.core.precision), proven on a CPU.

The key test emulates TF32 on a small ResNet (inputs and weights of every convolution and linear
layer rounded to a 10-bit mantissa, as tensor cores do) and shows that a comparison against float32
passes with the policy's TF32 tolerance and fails with float32 bounds: the policy's own and the
``atol=1e-4`` literals the chapters carried, which would therefore have failed on an Ampere GPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from helpers.core import precision, tf32
from helpers.core.comparison import assert_outputs_close, compare


def round_to_tf32(x, rounding="nearest"):
    """TF32's rounding (``round_mantissa``, 10 bits) of a tensor, or of a NumPy array via torch."""
    if isinstance(x, torch.Tensor):
        return tf32.round_mantissa(x, rounding=rounding)
    return tf32.round_mantissa(torch.from_numpy(np.array(x)), rounding=rounding).numpy()


U32 = 2.0**-24


def bits(x: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(x, dtype=np.float32).ravel().view(np.uint32)]


# ------------------------------------------------------------------------------ unit roundoffs
def test_unit_roundoffs():
    assert precision.unit_roundoff("fp32") == 2.0**-24
    assert precision.unit_roundoff("tf32") == 2.0**-11
    assert precision.unit_roundoff("bf16") == 2.0**-8
    assert precision.unit_roundoff("fp16") == 2.0**-11
    assert precision.unit_roundoff("int8") == pytest.approx(1 / 254)
    for mode, stored in {"fp32": 23, "tf32": 10, "bf16": 7, "fp16": 10}.items():
        assert precision.unit_roundoff(mode) == 2.0 ** -(stored + 1)
    with pytest.raises(ValueError, match="unknown math mode"):
        precision.unit_roundoff("fp8")


def test_coarsest():
    assert precision.coarsest("fp32", "tf32") == "tf32"
    assert precision.coarsest("fp32") == "fp32"
    assert precision.coarsest("tf32", "bf16", "fp32") == "bf16"
    assert precision.coarsest("fp16", "tf32") == "fp16"  # a tie keeps the first
    with pytest.raises(ValueError):
        precision.coarsest()
    with pytest.raises(ValueError):
        precision.coarsest("fp32", "double")


# ------------------------------------------------------------------------- rounding to TF32
HAND = np.array(
    [
        1.0,
        1 + 2**-11,  # exactly half-way between 1 and 1 + 2^-10: ties to even -> 1
        1 + 3 * 2**-11,  # half-way, odd last kept bit: ties to even -> 1 + 2^-9
        1 + 2**-11 + 2**-20,  # just above half-way -> 1 + 2^-10
        -(1 + 2**-10 + 2**-12),  # below half-way -> -(1 + 2^-10)
        np.inf,
        -np.inf,
        np.float32(3.4028235e38),  # largest float32: rounds past TF32's largest -> inf
        np.float32(1e-45),  # smallest subnormal -> 0
    ],
    dtype=np.float32,
)
TRUNCATE = [
    0x3F800000,
    0x3F800000,
    0x3F802000,
    0x3F800000,
    0xBF802000,
    0x7F800000,
    0xFF800000,
    0x7F7FE000,
    0x0,
]
NEAREST = [
    0x3F800000,
    0x3F800000,
    0x3F804000,
    0x3F802000,
    0xBF802000,
    0x7F800000,
    0xFF800000,
    0x7F800000,
    0x0,
]


@pytest.mark.parametrize("rounding, expected", [("nearest", NEAREST), ("truncate", TRUNCATE)])
def test_round_to_tf32_hand_computed_bit_patterns(rounding, expected):
    as_tensor = round_to_tf32(torch.from_numpy(HAND.copy()), rounding)
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.dtype == torch.float32
    assert bits(as_tensor.numpy()) == expected


def test_round_to_tf32_keeps_nan_and_signed_zero_and_rejects_other_dtypes():
    # NaNs whose payload would carry into the sign or vanish under rounding, then -0.0
    special = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0x80000000], dtype=np.uint32)
    for rounding in ("nearest", "truncate"):
        out = round_to_tf32(special.view(np.float32), rounding)
        assert np.isnan(out[:3]).all() and bits(out[3:]) == [0x80000000]
    with pytest.raises(TypeError, match="float32"):
        tf32.round_mantissa(np.ones(3, dtype=np.float32))  # a tensor is needed
    with pytest.raises(TypeError, match="float32"):
        round_to_tf32(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="rounding"):
        round_to_tf32(torch.ones(3), "stochastic")
    with pytest.raises(ValueError, match="bits"):
        tf32.round_mantissa(torch.ones(3), 0)


@pytest.mark.parametrize("rounding", ["nearest", "truncate"])
def test_round_to_tf32_keeps_ten_bits_is_idempotent_and_within_its_roundoff(rounding):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(20000) * 10.0 ** rng.integers(-30, 30, 20000)).astype(np.float32)
    r = round_to_tf32(x, rounding)
    assert (r.view(np.uint32) & 0x1FFF == 0).all()  # only the top 10 of 23 mantissa bits remain
    assert np.array_equal(round_to_tf32(r, rounding), r)  # idempotent
    rel = np.abs(r.astype(np.float64) - x) / np.abs(x.astype(np.float64))
    u = precision.unit_roundoff("tf32")
    assert rel.max() <= (u if rounding == "nearest" else 2 * u)
    if rounding == "truncate":
        assert (np.abs(r) <= np.abs(x)).all()  # toward zero
    else:
        assert rel.max() > 0.9 * u  # and the bound is reached: it is the right roundoff


def test_seven_bits_is_bfloat16_round_to_nearest_even():
    """With 7 bits the same rounding is bfloat16's: checked against PyTorch's own conversion."""
    x = torch.randn(50000, generator=torch.Generator().manual_seed(1)) * 100
    ours = tf32.round_mantissa(x, 7)
    assert torch.equal(ours, x.to(torch.bfloat16).float())


def test_tensor_rounding_keeps_layout_and_device():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    r = round_to_tf32(x)
    assert r.shape == x.shape and r.is_contiguous(memory_format=torch.channels_last)
    assert np.array_equal(bits(r.contiguous().numpy()), bits(round_to_tf32(x.numpy())))


# ---------------------------------------------------------------------- math modes in effect
@pytest.fixture
def tf32_flags(monkeypatch):
    """Leave PyTorch's TF32 settings as the test found them (and no NVIDIA override meanwhile)."""
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # 'cuda' as the course's GPUs
    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
    yield
    torch.backends.cudnn.allow_tf32 = cudnn
    torch.set_float32_matmul_precision(matmul)


def test_torch_math_mode_on_cpu():
    assert precision.torch_math_mode("cpu") == "fp32"
    assert precision.torch_math_mode(torch.device("cpu"), op="conv") == "fp32"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert precision.torch_math_mode("cpu") == "bf16"
        assert precision.torch_math_mode("cpu", op="matmul") == "bf16"
    assert precision.torch_math_mode("cpu") == "fp32"
    with pytest.raises(ValueError, match="op must be"):
        precision.torch_math_mode("cpu", op="attention")
    with pytest.raises(ValueError, match="'cpu' and 'cuda'"):
        precision.torch_math_mode("mps")


def test_torch_math_mode_reads_the_cuda_flags(tf32_flags):
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's defaults: convolutions TF32, matmuls not
    torch.set_float32_matmul_precision("highest")
    cuda = torch.device("cuda:0")  # a device object can be made without a GPU
    assert precision.torch_math_mode(cuda, op="conv") == "tf32"
    assert precision.torch_math_mode(cuda, op="matmul") == "fp32"
    assert precision.torch_math_mode(cuda) == "tf32"  # a conv net: TF32
    torch.set_float32_matmul_precision("high")
    assert precision.torch_math_mode("cuda:1", op="matmul") == "tf32"
    with precision.strict_fp32():
        assert precision.torch_math_mode("cuda") == "fp32"
    assert precision.torch_math_mode("cuda", op="conv") == "tf32"


def test_torch_math_mode_asks_the_gpu_for_tensor_cores(tf32_flags, monkeypatch):
    torch.backends.cudnn.allow_tf32 = True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (8, 0))
    assert precision.torch_math_mode("cuda") == "tf32"  # A100
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 5))
    assert precision.torch_math_mode("cuda") == "fp32"  # T4: no TF32 tensor cores
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    assert precision.torch_math_mode("cuda") == "tf32"  # H100/H200
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert precision.torch_math_mode("cuda") == "fp32"


def test_torch_math_mode_under_cuda_autocast(tf32_flags, monkeypatch):
    monkeypatch.setattr(
        torch, "is_autocast_enabled", lambda device_type=None: device_type == "cuda"
    )
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda device_type: torch.float16)
    assert precision.torch_math_mode("cuda") == "fp16"
    assert precision.torch_math_mode("cpu") == "fp32"


def test_set_tf32_and_strict_fp32_restore_the_flags(tf32_flags):
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    with pytest.raises(RuntimeError, match="inside"):
        with precision.strict_fp32():
            assert torch.backends.cudnn.allow_tf32 is False
            assert torch.backends.cuda.matmul.allow_tf32 is False
            assert precision.torch_math_mode("cuda") == "fp32"
            assert torch.get_float32_matmul_precision() == "highest"
            assert precision.torch_math_mode("cpu") == "fp32"  # oneDNN back to IEEE too
            raise RuntimeError("inside")
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "medium"
    assert precision.torch_math_mode("cpu") == "bf16"  # 'medium' lets oneDNN use bf16 on a CPU
    before = precision.set_tf32(False)
    assert before["conv"] == ("legacy", True) and before["float32_matmul_precision"] == "medium"
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    precision.restore_tf32(before)
    assert torch.backends.cudnn.allow_tf32 and torch.get_float32_matmul_precision() == "medium"
    torch.set_float32_matmul_precision("highest")
    with precision.strict_fp32():
        pass
    assert torch.get_float32_matmul_precision() == "highest"


def test_oneflow_math_mode_reads_its_environment(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # 'cuda' as the course's GPUs
    monkeypatch.delenv(precision.ONEFLOW_TF32_ENV, raising=False)
    monkeypatch.delenv(precision.NVIDIA_TF32_ENV, raising=False)
    assert precision.oneflow_math_mode("cpu") == "fp32"
    # OneFlow 0.9.0's default: TF32 on for cuBLAS, and cuDNN convolutions allow it regardless
    assert precision.oneflow_math_mode("cuda:0", op="matmul") == "tf32"
    assert precision.oneflow_math_mode("cuda", op="conv") == "tf32"
    for off in ("0", "false", "No", ""):
        monkeypatch.setenv(precision.ONEFLOW_TF32_ENV, off)
        assert precision.oneflow_math_mode("cuda", op="matmul") == "fp32"
        # the variable does not reach convolutions: a ResNet still runs TF32
        assert precision.oneflow_math_mode("cuda") == "tf32"
    monkeypatch.setenv(precision.ONEFLOW_TF32_ENV, "Yes")
    assert precision.oneflow_math_mode("cuda", op="matmul") == "tf32"
    monkeypatch.setenv(precision.NVIDIA_TF32_ENV, "0")
    assert precision.oneflow_math_mode("cuda") == "fp32"
    monkeypatch.delenv(precision.NVIDIA_TF32_ENV)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 5))
    assert precision.oneflow_math_mode("cuda") == "fp32"  # T4: no TF32 tensor cores
    assert precision.oneflow_math_mode("cuda", amp=True) == "fp16"
    assert precision.oneflow_math_mode("cpu", amp=True) == "fp32"


def test_oneflow_strict_fp32_env_makes_both_operators_fp32(monkeypatch):
    env = precision.oneflow_strict_fp32_env()
    assert env == {"ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION": "0", "NVIDIA_TF32_OVERRIDE": "0"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for op in ("conv", "matmul", "model"):
        assert precision.oneflow_math_mode("cuda", op=op) == "fp32"


# ------------------------------------------------------------------------------------ tolerance
def test_tolerance_formula_and_use():
    tol = precision.tolerance("tf32", scale=3.0)
    rel = 512 * (2.0**-11 + math.log2(4608) * U32)
    assert tol.rtol == pytest.approx(rel) and tol.atol == pytest.approx(3 * rel)
    assert tol.as_kwargs() == {"atol": tol.atol, "rtol": tol.rtol}
    assert "tf32" in str(tol) and tol.mode == "tf32" and tol.accumulation == 512
    op = precision.tolerance("fp32", accumulation="op")
    assert op.rtol == pytest.approx(8 * (U32 + math.log2(4608) * U32))
    assert precision.tolerance("fp16", accumulation=2.0).rtol == pytest.approx(
        2 * (2.0**-11 + math.log2(4608) * U32)
    )
    # ordered like the modes' unit roundoffs
    rels = [precision.tolerance(m).rtol for m in ("fp32", "tf32", "bf16")]
    assert rels == sorted(rels) and rels[1] > 500 * rels[0]
    assert_outputs_close(np.ones(3) + 0.9 * tol.atol, np.ones(3), **tol.as_kwargs())


def test_an_explicit_accumulation_wins_over_a_named_network():
    """``accumulation="op"`` or a number sets the bound even when ``network`` is named too; only
    the default ``"network"`` takes the named network's measured factor (M04 of the mutation
    sample: a named network overrode them, a bound up to 64x looser)."""
    per_unit = 2.0**-11 + math.log2(4608) * U32  # TF32's u + the float32 order term
    op = precision.tolerance("tf32", accumulation="op", network="resnet101", scale=3.0)
    assert (op.rtol, op.atol) == pytest.approx((8 * per_unit, 3 * 8 * per_unit))
    number = precision.tolerance("tf32", accumulation=2.0, network="resnet18", scale=3.0)
    assert (number.rtol, number.atol) == pytest.approx((2 * per_unit, 3 * 2 * per_unit))
    for acc in ("op", 2.0):  # the same bound as without the network
        alone = precision.tolerance("fp32", accumulation=acc, scale=5.0)
        named = precision.tolerance("fp32", accumulation=acc, network="resnet101", scale=5.0)
        assert (named.atol, named.rtol) == (alone.atol, alone.rtol)
    # the control: the default accumulation does take the network's factor (16 for ResNet-18)
    r18 = precision.tolerance("tf32", network="resnet18", scale=3.0)
    assert (r18.rtol, r18.atol) == pytest.approx((16 * per_unit, 3 * 16 * per_unit))
    assert precision.tolerance("tf32", network="resnet101").rtol == pytest.approx(64 * op.rtol)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"accumulation": "layer"},
        {"accumulation": 0},
        {"accumulation": float("nan")},
        {"scale": -1.0},
        {"scale": float("inf")},
    ],
)
def test_tolerance_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        precision.tolerance("fp32", **kwargs)


def test_output_scale():
    assert precision.output_scale(np.array([0.1, -0.5])) == 1.0  # the floor
    assert precision.output_scale(torch.tensor([[3.0, -7.5]])) == 7.5
    assert precision.output_scale(np.array([0.1, -0.5]), floor=0.0) == 0.5
    with pytest.raises(ValueError):
        precision.output_scale(np.array([np.nan]))


# ------------------------------------------------------------------------------- determinism
def test_deterministic_sets_and_restores(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    with precision.deterministic():
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        import os

        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        x = torch.randn(4, 3, 8, 8, requires_grad=True)
        torch.nn.functional.conv2d(x, torch.randn(2, 3, 3, 3)).sum().backward()
    after = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    assert after == before
    import os

    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


# ----------------------------------------------------------------------------- emulate_tf32
def test_emulate_tf32_rounds_inside_and_restores_everything():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 5))
    originals = [p.detach().clone() for p in net.parameters()]
    conv, lin = net[0], net[2]
    with precision.emulate_tf32(net) as same:
        assert same is net
        for layer in (conv, lin):
            assert (layer.weight.detach().numpy().view(np.uint32) & 0x1FFF == 0).all()
        assert torch.equal(conv.bias, originals[1])  # biases are added in float32
    for p, o in zip(net.parameters(), originals):
        assert torch.equal(p, o)  # restored bit for bit
    assert not any(m._forward_pre_hooks or m._backward_pre_hooks for m in net.modules())
    with pytest.raises(RuntimeError, match="boom"):
        with precision.emulate_tf32(net):
            raise RuntimeError("boom")
    for p, o in zip(net.parameters(), originals):
        assert torch.equal(p, o)


def test_emulate_tf32_is_exact_tf32_arithmetic_for_a_linear_layer():
    """Forward: rounded input times rounded weight; the gradient passes through the rounding."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 8, bias=False).double().float()
    x = torch.randn(5, 64, requires_grad=True)
    g = torch.randn(5, 8)
    r = round_to_tf32
    w = lin.weight.detach()
    with precision.emulate_tf32(lin):
        y = lin(x)
        y.backward(g)
    expected = r(x.detach()).double() @ r(w).double().T
    assert torch.allclose(y.double(), expected, rtol=0, atol=1e-5)
    assert torch.allclose(x.grad.double(), g.double() @ r(w).double(), rtol=0, atol=1e-5)
    with torch.inference_mode(), precision.emulate_tf32(lin):
        assert torch.allclose(lin(x).double(), expected, rtol=0, atol=1e-5)


# --------------------------------------------------------- the proof: TF32 emulated on a ResNet
@pytest.fixture(scope="module")
def resnet():
    """Chapter 6's setting in quick mode: ResNet-18, BatchNorm calibrated, 64 px, batch 8, seeded."""
    pytest.importorskip("torchvision", reason="no torchvision: the ResNet comes from it")
    from helpers.workload import data, models

    torch.manual_seed(0)
    model = models.build_classifier("torch", "resnet18", num_classes=8)
    images, _ = data.make_images(24, 64, seed=1)
    batch = torch.from_numpy(data.normalize(images))
    models.calibrate_batchnorm(model, batch[8:])
    x = batch[:8]
    with torch.inference_mode():
        ref = model(x)
    return model, x, ref


def emulated(model, x, **kwargs):
    with torch.inference_mode(), precision.emulate_tf32(model, **kwargs):
        return model(x)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # every conv and linear layer in TF32 (OneFlow's defaults on Ampere+)
        {"rounding": "truncate"},  # tensor cores fed unrounded float32 registers
    ],
    ids=["all-layers", "truncating"],
)
def test_tf32_passes_the_policy_and_breaks_float32_literals(resnet, kwargs):
    model, x, ref = resnet
    out = emulated(model, x, **kwargs)
    scale = precision.output_scale(ref)
    cmp = assert_outputs_close(
        out, ref, **precision.tolerance("tf32", scale=scale).as_kwargs(), name="TF32 vs float32"
    )
    assert compare(out, ref, topk=(1,)).topk[1] == 1.0  # the predictions themselves agree
    # The float32 literal the chapters used (ch0 cell 7, ch1 cell 17, ch5 cells 5 and 12): fails.
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(out, ref, atol=1e-4, rtol=1e-4)
    # The policy's own float32 tolerance: fails too, so TF32 cannot hide behind it.
    fp32 = precision.tolerance("fp32", scale=scale)
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(out, ref, **fp32.as_kwargs())
    assert cmp.max_abs > 2 * (fp32.atol + fp32.rtol * float(ref.abs().max()))


def test_tf32_batch_invariance_check_needs_the_tf32_tolerance(resnet):
    """ch5 cell 5: eval outputs of single images vs the batch. Under TF32 (each batch size its own
    cuDNN algorithm) the batch-1 outputs are compared with the policy's TF32 tolerance."""
    model, x, ref = resnet
    with torch.inference_mode(), precision.emulate_tf32(model):
        single = torch.cat([model(x[i : i + 1]) for i in range(len(x))])
    scale = precision.output_scale(ref)
    assert_outputs_close(single, ref, **precision.tolerance("tf32", scale=scale).as_kwargs())
    with pytest.raises(AssertionError):
        assert_outputs_close(single, ref, atol=1e-4)


def test_float32_in_another_order_passes_the_float32_policy(resnet):
    """The float32 tolerance is not too tight: another memory layout (another kernel order) passes."""
    model, x, ref = resnet
    with torch.inference_mode():
        other = model.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
        model.to(memory_format=torch.contiguous_format)
        single = torch.cat([model(x[i : i + 1]) for i in range(len(x))])
    scale = precision.output_scale(ref)
    for out in (other, single):
        assert_outputs_close(out, ref, **precision.tolerance("fp32", scale=scale).as_kwargs())


def test_emulation_left_the_model_unchanged(resnet):
    model, x, ref = resnet
    emulated(model, x)
    with torch.inference_mode():
        assert torch.equal(model(x), ref)


def _planted(model, bug):
    """A copy of ``model`` with one realistic bug: BatchNorm eps 1e-3, or one conv's weights x1.01."""
    import copy

    bad = copy.deepcopy(model)
    if bug == "bn eps":
        for m in bad.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.eps = 1e-3
    else:
        convs = [m for m in bad.modules() if isinstance(m, torch.nn.Conv2d)]
        with torch.no_grad():
            convs[len(convs) // 2].weight.mul_(1.01)
    return bad


@pytest.mark.parametrize("bug", ["bn eps", "conv x1.01"])
def test_the_network_float32_bound_catches_planted_bugs_a_tf32_bound_passes(resnet, bug):
    """Why equality is checked in strict float32: the old network-wide TF32 bound let bugs through."""
    model, x, ref = resnet
    with torch.inference_mode():
        out = _planted(model, bug)(x)
        other = model.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
        model.to(memory_format=torch.contiguous_format)
    cmp = assert_outputs_close(other, ref, mode="fp32", network="resnet18")  # a correct reordering
    assert cmp.used < 0.5
    with pytest.raises(AssertionError, match="not close"):
        assert_outputs_close(out, ref, mode="fp32", network="resnet18")
    old_tf32 = precision.tolerance("tf32", scale=precision.output_scale(ref))  # factor 512
    if bug == "conv x1.01":  # the weight bug hides inside it: an elementwise TF32 check is blind
        assert_outputs_close(out, ref, **old_tf32.as_kwargs())


def test_tf32_is_checked_at_task_level_and_the_check_can_fail(resnet):
    from helpers.core.comparison import assert_task_level

    model, x, ref = resnet
    check = assert_task_level(emulated(model, x), ref, mode="tf32", logits=True, network="resnet18")
    assert check.nearest_own == 1.0 and max(check.controls.values()) < 1.0
    with pytest.raises(AssertionError):
        assert_task_level(-emulated(model, x), ref, mode="tf32", logits=True, network="resnet18")


def test_network_accumulation_is_measured_per_network():
    assert precision.tolerance("fp32", network="resnet18").rtol < precision.tolerance("fp32").rtol
    assert precision.tolerance("fp32", network="resnet101").rtol == precision.tolerance("fp32").rtol
    # a network the course never measured: the deepest one's factor, and a line saying how to
    # measure it (precision.measure_accumulation; tests/course/test_own_model.py measures two)
    assert precision.tolerance("fp32", network="vgg16").rtol == precision.tolerance("fp32").rtol
