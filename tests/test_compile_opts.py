"""helpers.compiling.graph_switches: OneFlow graph switches (in a subprocess for MLIR) and PyTorch equivalents."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.compiling import graph_ops
from helpers.compiling import graph_switches as co
from helpers.core.subprocess_run import PAD_CONV_FUSION_ENV, run_in_subprocess
from helpers.workload import models


@pytest.fixture(scope="module")
def torch_model(torch_mod):
    torch_mod.manual_seed(0)
    return models.build_resnet("torch", "resnet18", num_classes=4).eval()


@pytest.fixture(scope="module")
def x(torch_mod):
    return torch_mod.from_numpy(
        np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    )


def test_fold_conv_bn_removes_batchnorm(torch_mod, torch_model, x):
    folded = co.fold_conv_bn(torch_model)
    before, after = graph_ops.fx_op_counts(torch_model), graph_ops.fx_op_counts(folded)
    assert before["BatchNorm2d"] == 20 and "BatchNorm2d" not in after and after["Conv2d"] == 20
    with torch_mod.no_grad():
        # folding reorders float32 arithmetic: rounding-level differences only
        torch_mod.testing.assert_close(folded(x), torch_model(x), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="eval mode"):
        co.fold_conv_bn(models.build_resnet("torch", "resnet18", num_classes=4))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        co.fold_conv_bn(lambda t: t)


def test_explicit_padding_same_outputs(torch_mod, torch_model, x):
    padded = co.explicit_padding(torch_model)
    assert graph_ops.fx_op_counts(padded)["ZeroPad2d"] == 17  # every 3x3 and the 7x7 stem conv
    with torch_mod.no_grad():
        torch_mod.testing.assert_close(padded(x), torch_model(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no zero-padded Conv2d"):
        co.explicit_padding(torch_mod.nn.Sequential(torch_mod.nn.Conv2d(3, 3, 1)))


def test_channels_last_and_autocast(torch_mod, torch_model, x):
    cl = co.to_channels_last(torch_model)
    assert cl.conv1.weight.is_contiguous(memory_format=torch_mod.channels_last)
    assert torch_model.conv1.weight.is_contiguous()  # the original is untouched
    assert co.reduced_precision_dtype("cpu") == torch_mod.bfloat16
    out = co.autocast_fn(torch_model, "cpu")(x)
    assert out.dtype == torch_mod.bfloat16
    with pytest.raises(ValueError, match="no autocast choice"):
        co.reduced_precision_dtype("meta")
    with pytest.raises(TypeError):
        co.to_channels_last("model")


def test_graph_switch_validation(flow, torch_model):
    with pytest.raises(TypeError, match="OneFlow module"):
        co.build_inference_graph(torch_model)
    with pytest.raises(ValueError, match="unknown switches"):
        co._variant_switches({"name": "x", "tensorrt": True})
    with pytest.raises(ValueError, match="non-empty 'name'"):
        co._variant_switches({"amp": True})
    fm = models.build_resnet("oneflow", "resnet18", num_classes=4).eval()
    g = co.build_inference_graph(fm, add_fusion=True)
    g(flow.ones(1, 3, 32, 32))
    assert "add_n" not in graph_ops.oneflow_op_counts(g)  # residual adds fused into the convs


def test_ablation_in_a_fresh_process_fuses_pads(tmp_path, torch_mod, torch_model, x):
    np.savez(tmp_path / "w.npz", **models.state_dict_numpy(torch_model))
    np.save(tmp_path / "x.npy", x.numpy())
    kwargs = dict(
        arch="resnet18",
        num_classes=4,
        weights_path=str(tmp_path / "w.npz"),
        input_path=str(tmp_path / "x.npy"),
        out_dir=str(tmp_path / "out"),
        warmup=1,
        repeats=2,
        variants=[{"name": "fused"}, {"name": "fused+add", "add_fusion": True}],
    )
    res = run_in_subprocess(
        "helpers.compiling.graph_switches:oneflow_graph_ablation",
        kwargs,
        env=PAD_CONV_FUSION_ENV,
        timeout_s=300,
    )["result"]
    assert res["mlir_env"] == PAD_CONV_FUSION_ENV
    fused = res["variants"]["fused"]
    assert (
        "pad" not in fused["op_counts"] and fused["op_counts"]["conv2d"] == 20
    )  # 17 pads fused into convs
    assert "add_n" not in res["variants"]["fused+add"]["op_counts"]
    with torch_mod.no_grad():
        ref = torch_model(x).numpy()
    for v in res["variants"].values():
        assert len(v["times_s"]) == 2 and v["compile_s"] > 0
        np.testing.assert_allclose(np.load(v["output"]), ref, atol=1e-4, rtol=1e-4)


def test_tolerance_scales_with_the_reference():
    small = co.tolerance("float32", np.array([0.5, -0.2]))
    assert small == {"atol": 1e-3, "min_cosine": 0.99999}
    big = co.tolerance("bfloat16", np.array([100.0, -3.0]))
    assert big["atol"] == pytest.approx(30.0) and big["min_cosine"] == 0.98
    assert co.tolerance("float16", [1.0])["atol"] < co.tolerance("bfloat16", [1.0])["atol"]
    with pytest.raises(ValueError, match="unknown precision"):
        co.tolerance("int8", [1.0])


def test_torch_compile_pins_the_thread_count(torch_mod):
    import torch._inductor.config as inductor_config

    net = torch_mod.nn.Sequential(torch_mod.nn.Linear(8, 4), torch_mod.nn.ReLU()).eval()
    x = torch_mod.randn(2, 8)
    compiled = co.torch_compile(net)
    assert inductor_config.cpp.threads == torch_mod.get_num_threads()
    with torch_mod.no_grad():
        torch_mod.testing.assert_close(compiled(x), net(x))  # same maths, rounding only
    with pytest.raises(ValueError, match="unknown torch.compile mode"):
        co.torch_compile(net, mode="fastest")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        co.torch_compile(lambda t: t)
