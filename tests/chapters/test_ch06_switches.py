"""helpers.chapters.ch06_switches: chapter 6's OneFlow graph switches and its ablation in a fresh
process (MLIR passes, TF32 environment, the math mode each variant ran in).

Every fusion test has its control: the same graph without the switch still has the ops the switch removes.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.chapters import ch06_switches as gs
from helpers.compiling import graph_ops
from helpers.core import precision
from helpers.core.subprocess_run import run_in_subprocess
from helpers.workload import models


@pytest.fixture(scope="module")
def torch_model(torch_mod):
    torch_mod.manual_seed(0)
    return models.build_classifier("torch", "resnet18", num_classes=4).eval()


@pytest.fixture(scope="module")
def x(torch_mod):
    return torch_mod.from_numpy(
        np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    )


def test_explicit_padding_same_outputs(torch_mod, torch_model, x):
    padded = gs.explicit_padding(torch_model)
    assert "ZeroPad2d" not in graph_ops.fx_op_counts(torch_model)  # the control
    assert graph_ops.fx_op_counts(padded)["ZeroPad2d"] == 17  # every 3x3 and the 7x7 stem conv
    assert torch_model.conv1.padding == (3, 3)  # the original is untouched
    with torch_mod.no_grad():
        torch_mod.testing.assert_close(padded(x), torch_model(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no zero-padded Conv2d"):
        gs.explicit_padding(torch_mod.nn.Sequential(torch_mod.nn.Conv2d(3, 3, 1)))


def test_mlir_environments():
    assert gs.MLIR_VARS == tuple(sorted({**gs.PAD_CONV_FUSION_ENV, **gs.BN_FOLDING_ENV}))
    for env in (gs.PAD_CONV_FUSION_ENV, gs.BN_FOLDING_ENV):
        assert env.items() >= gs.MLIR_ROUND_TRIP.items() and len(env) == 2
    assert set(gs.PAD_CONV_FUSION_ENV) != set(gs.BN_FOLDING_ENV)


def test_switched_graph_add_fusion_against_its_control(flow):
    fm = models.build_classifier("oneflow", "resnet18", num_classes=4).eval()
    xf = flow.tensor(np.random.default_rng(1).normal(size=(1, 3, 32, 32)).astype(np.float32))
    plain, fused = gs.SwitchedGraph(fm), gs.SwitchedGraph(fm, add_fusion=True)
    assert isinstance(fused, gs.graphs.InferenceGraph)  # built on chapter 3's one wrapper
    y_plain, y_fused = plain(xf).numpy(), fused(xf).numpy()
    counts_plain, counts_fused = (
        graph_ops.oneflow_op_counts(plain),
        graph_ops.oneflow_op_counts(fused),
    )
    assert counts_plain["add_n"] == 8  # the control: one residual add per BasicBlock
    assert "add_n" not in counts_fused  # fused into the ops that compute one of their inputs
    np.testing.assert_allclose(y_fused, y_plain, atol=1e-4, rtol=1e-4)


def test_each_switch_reaches_the_graphs_config(flow):
    """AMP and the convolution search change nothing on a CPU, so their effect is read back from
    the graph's own config (the proto OneFlow compiles with); every switch against its default."""
    fm = models.build_classifier("oneflow", "resnet18", num_classes=4).eval()

    def config(**switches):
        p = gs.SwitchedGraph(fm, **switches).config.proto
        return (
            p.enable_auto_mixed_precision,
            p.cudnn_conv_heuristic_search_algo,
            p.enable_fuse_add_to_output,
        )

    assert config() == (False, True, False)  # the control: OneFlow's defaults
    assert config(amp=True) == (True, True, False)
    assert config(conv_search=True) == (False, False, False)  # measured, not guessed
    assert config(add_fusion=True) == (False, True, True)


def test_variant_validation():
    assert gs._variant_switches({"name": "x", "amp": 1})[1] == {
        "amp": True,
        "conv_search": False,
        "add_fusion": False,
    }
    with pytest.raises(ValueError, match="unknown switches"):
        gs._variant_switches({"name": "x", "tensorrt": True})
    with pytest.raises(ValueError, match="non-empty 'name'"):
        gs._variant_switches({"amp": True})
    # the control's flag is not a graph switch, but a variant may carry it
    assert gs._variant_switches({"name": "x", gs.NATIVE_PADDING: True}) == (
        "x",
        {"amp": False, "conv_search": False, "add_fusion": False},
    )
    with pytest.raises(ValueError, match="non-empty 'name'"):
        gs._variant_switches("x")  # not a dict


def test_ablation_in_a_fresh_process_fuses_pads(tmp_path, monkeypatch, torch_mod, torch_model, x):
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
        variants=[
            {"name": "fused"},
            {"name": "fused+add", "add_fusion": True},
            {"name": "native", "native_padding": True},  # the control: no explicit pads at all
            {"name": "fused again"},  # an A/A twin, kept apart from its original
        ],
        apart=[["fused", "fused again"]],  # JSON lists: never one right after the other
    )
    # a BN-folding variable set in this process must not reach the child: `unset` removes it
    monkeypatch.setenv("ONEFLOW_MLIR_ENABLE_INFERENCE_OPTIMIZATION", "1")
    strict = precision.oneflow_strict_fp32_env()
    res = run_in_subprocess(
        "helpers.chapters.ch06_switches:oneflow_graph_ablation",
        kwargs,
        env={**gs.PAD_CONV_FUSION_ENV, **strict},
        unset=gs.MLIR_VARS,
        timeout_s=300,
    )["result"]
    assert res["mlir_env"] == gs.PAD_CONV_FUSION_ENV
    assert res["precision_env"] == strict  # the child reports the TF32 variables it saw
    # IEEE float32 on any device: no AMP variant, and on a GPU the strict environment turns TF32 off
    assert {v["math_mode"] for v in res["variants"].values()} == {"fp32"}
    fused = res["variants"]["fused"]
    assert fused["traced_op_counts"]["pad"] == 17  # the control: explicit_padding's pads, traced
    assert (
        "pad" not in fused["op_counts"] and fused["op_counts"]["conv2d"] == 20
    )  # fused into convs
    assert fused["op_counts"]["normalization"] == 20  # BN folding was not enabled
    native = res["variants"]["native"]
    assert fused["padding"] == "explicit" and native["padding"] == "native"
    assert "pad" not in native["traced_op_counts"]  # mutation: ignoring the flag traces 17 pads
    assert native["traced_op_counts"]["conv2d"] == 20
    for v in res["variants"].values():  # every timing says where and how it ran
        assert {"threads", "cores_used", "contended", "load"} <= set(v)
    both = res["variants"]["fused+add"]
    assert both["traced_op_counts"]["add_n"] == 8 and "add_n" not in both["op_counts"]
    with torch_mod.no_grad():
        ref = torch_model(x).numpy()
    for v in res["variants"].values():
        assert len(v["times_s"]) == 2 and v["compile_s"] > 0
        np.testing.assert_allclose(np.load(v["output"]), ref, atol=1e-4, rtol=1e-4)
