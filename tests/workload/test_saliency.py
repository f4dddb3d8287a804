"""helpers.workload.saliency: chapter 4's forward->backward->forward task, its variants, eager and nn.Graph."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.workload import models
from helpers.workload import saliency as st

SHAPE = (2, 3, 32, 32)


@pytest.fixture(scope="module")
def torch_model(torch_mod):
    torch_mod.manual_seed(0)
    return models.build_classifier("torch", "resnet18", num_classes=4).eval()


@pytest.fixture(scope="module")
def flow_model(flow, torch_model):
    return models.twin(
        torch_model, "oneflow", models.build_classifier, "resnet18", num_classes=4
    ).eval()


@pytest.fixture(scope="module")
def x_np():
    return np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)


def test_variants_prune_cumulatively(torch_mod, torch_model, x_np):
    assert st.VARIANTS[0] == "original" and st.VARIANTS[-1] == "single_forward"
    assert list(st.STEPS) == list(st.VARIANTS)
    x = torch_mod.from_numpy(x_np)
    weight_grads, forwards = {}, {}
    for v in st.VARIANTS:
        task = st.make_task(torch_model, v)
        calls = []
        hook = task.module.register_forward_hook(lambda *_, seen=calls: seen.append(1))
        task(x)
        hook.remove()
        weight_grads[v] = task.module.fc.weight.grad is not None
        forwards[v] = len(calls)
    assert weight_grads == {v: v == "original" for v in st.VARIANTS}
    assert forwards == {v: 1 if v == "single_forward" else 2 for v in st.VARIANTS}
    with pytest.raises(ValueError, match="unknown task variant 'fast'"):
        st.make_task(torch_model, "fast")


def test_torch_variants_give_identical_maps(torch_mod, torch_model, x_np):
    x = torch_mod.from_numpy(x_np)
    results = {v: st.make_task(torch_model, v)(x) for v in st.VARIANTS}
    ref = results["original"]
    assert ref.saliency.shape == (SHAPE[0], SHAPE[2], SHAPE[3])
    assert float(ref.saliency.abs().sum()) > 0
    for v, r in results.items():
        assert torch_mod.equal(r.saliency, ref.saliency), v
        assert torch_mod.equal(r.logits, ref.logits), v


def test_original_keeps_weights_and_computes_param_grads(torch_mod, torch_model, x_np):
    task = st.make_task(torch_model, "original")
    before = task.module.fc.weight.detach().clone()
    task(torch_mod.from_numpy(x_np))
    assert task.module.fc.weight.grad is not None  # the waste: weight gradients
    assert torch_mod.equal(task.module.fc.weight, before)  # lr 0: the update changes nothing
    pruned = st.make_task(torch_model, "single_forward")
    pruned(torch_mod.from_numpy(x_np))
    assert pruned.module.fc.weight.grad is None
    assert all(p.requires_grad for p in torch_model.parameters())  # the caller's model is untouched


def test_oneflow_eager_and_graph_match_torch(flow, torch_mod, torch_model, flow_model, x_np):
    ref = st.make_task(torch_model, "original")(torch_mod.from_numpy(x_np)).saliency.numpy()
    xf = flow.tensor(x_np)
    eager = {
        v: st.make_task(flow_model, v)(xf).saliency.numpy() for v in ("original", "single_forward")
    }
    assert np.array_equal(eager["original"], eager["single_forward"])
    # OneFlow vs PyTorch: different kernels, float32 rounding only (maps are ~1e-2 in size).
    np.testing.assert_allclose(eager["original"], ref, atol=1e-6, rtol=1e-4)
    for v in ("original", "single_forward"):
        gt = st.make_graph_task(flow_model, v, SHAPE)
        first, second = gt(xf).saliency.numpy(), gt(xf).saliency.numpy()
        assert np.array_equal(first, second), "the holder must be reset between calls"
        np.testing.assert_allclose(first, eager["original"], atol=1e-6, rtol=1e-4)


def test_graph_op_counts_show_the_waste(flow, flow_model, x_np):
    from helpers.compiling.graph_ops import oneflow_op_counts

    xf = flow.tensor(x_np)
    counts = {}
    for v in ("original", "single_forward"):
        gt = st.make_graph_task(flow_model, v, SHAPE)
        gt(xf)
        counts[v] = oneflow_op_counts(gt.graph)
    assert (
        counts["original"]["conv_filter_grad"] == 20
        and "conv_filter_grad" not in counts["single_forward"]
    )
    assert counts["original"]["conv2d"] == 2 * counts["single_forward"]["conv2d"] == 40


def test_bad_inputs(torch_mod, flow, torch_model, flow_model, x_np):
    with pytest.raises(ValueError, match="eval mode"):
        st.make_task(models.build_classifier("torch", "resnet18", num_classes=4), "original")
    task = st.make_task(torch_model, "single_forward")
    with pytest.raises(ValueError, match=r"\(batch, 3, H, W\)"):
        task(torch_mod.zeros(3, 32, 32))
    with pytest.raises(TypeError, match="oneflow tensor"):
        task(flow.tensor(x_np))
    with pytest.raises(TypeError, match="OneFlow module"):
        st.make_graph_task(torch_model, "original", SHAPE)
    with pytest.raises(ValueError, match="input_shape"):
        st.make_graph_task(flow_model, "original", (2, 3, 32))
    gt = st.make_graph_task(flow_model, "single_forward", SHAPE)
    with pytest.raises(ValueError, match="static shapes"):
        gt(flow.tensor(x_np[:1]))
    with pytest.raises(ValueError, match="unknown task variant"):
        st.make_task(torch_model, "nope")


def test_task_peak_memory_sees_weight_gradients(torch_mod, torch_model, x_np):
    from helpers.measure import profiling

    x = torch_mod.from_numpy(x_np)
    mem = {
        v: profiling.task_peak_memory(st.make_task(torch_model, v), x)
        for v in ("original", "single_forward")
    }
    weights = sum(p.numel() * 4 for p in torch_model.parameters())
    assert mem["original"]["retained"] >= 0.95 * weights  # the weight gradients stay allocated
    assert mem["single_forward"]["retained"] < 0.05 * weights
    assert mem["single_forward"]["peak"] < mem["original"]["peak"]
    with pytest.raises(TypeError, match="PyTorch task"):
        profiling.task_peak_memory(lambda t: t, x)
