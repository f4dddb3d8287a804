"""helpers.workload.models: building the course models in both frameworks and moving weights between them."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core.comparison import assert_outputs_close
from helpers.workload import models

SIZE = 32
CLASSES = 8


def _input(batch=2, size=SIZE, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, 3, size, size)).astype(np.float32)


@pytest.fixture(scope="module")
def torch_resnet(torch_mod):
    torch_mod.manual_seed(0)
    return models.build_classifier("torch", "resnet18", num_classes=CLASSES).eval()


@pytest.fixture(scope="module")
def flow_resnet(flow):
    return models.build_classifier("oneflow", "resnet18", num_classes=CLASSES).eval()


def test_unknown_framework_and_arch():
    with pytest.raises(ValueError, match="unknown framework 'jax'"):
        models.build_classifier("jax", "resnet18")
    with pytest.raises(ValueError, match="unknown framework"):
        models.nn_namespace("tensorflow")
    with pytest.raises(ValueError, match="resnet7"):
        models.build_classifier("torch", "resnet7")
    with pytest.raises(ValueError, match="num_classes"):
        models.build_classifier("torch", "resnet18", num_classes=0)


def test_zero_init_residual_starts_each_block_as_its_shortcut(torch_mod):
    # The last BatchNorm of every residual branch starts at zero only when asked (torch here;
    # flowvision takes the same argument, and chapter 2's twins copy the weights anyway).
    def last_bn_weights(net):
        return [
            b.bn2.weight.detach().abs().sum().item()
            for b in net.modules()
            if type(b).__name__ == "BasicBlock"
        ]

    zeroed = models.build_classifier("torch", "resnet18", CLASSES, zero_init_residual=True)
    plain = models.build_classifier("torch", "resnet18", CLASSES)
    assert last_bn_weights(zeroed) and not any(last_bn_weights(zeroed))
    assert all(last_bn_weights(plain))


def test_framework_of(torch_resnet, flow_resnet, torch_mod, flow):
    assert models.framework_of(torch_resnet) == "torch"
    assert models.framework_of(flow_resnet) == "oneflow"
    assert models.framework_of(torch_mod.zeros(1)) == "torch"
    with pytest.raises(TypeError, match="neither"):
        models.framework_of(np.zeros(1))


def test_resnet_keys_match_across_frameworks(torch_resnet, flow_resnet):
    t, f = models.state_dict_numpy(torch_resnet), models.state_dict_numpy(flow_resnet)
    assert set(t) == set(f)
    assert all(t[k].shape == f[k].shape for k in t)
    assert t["fc.weight"].shape == (CLASSES, 512)


def test_torch_to_oneflow_resnet_outputs_match(torch_mod, flow, torch_resnet, flow_resnet):
    models.transfer_weights(torch_resnet, flow_resnet)
    x = _input()
    with torch_mod.no_grad():
        ref = torch_resnet(torch_mod.from_numpy(x))
    out = flow_resnet(flow.tensor(x))
    assert tuple(out.shape) == (2, CLASSES)
    assert_outputs_close(out, ref, atol=1e-4, name="oneflow vs torch resnet18")


def test_oneflow_to_torch_resnet_outputs_match(torch_mod, flow):
    flow.manual_seed(1)
    src = models.build_classifier("oneflow", "resnet18", num_classes=CLASSES).eval()
    dst = models.build_classifier("torch", "resnet18", num_classes=CLASSES).eval()
    assert models.transfer_weights(src, dst) is dst
    x = _input(seed=1)
    with torch_mod.no_grad():
        out = dst(torch_mod.from_numpy(x))
    assert_outputs_close(out, src(flow.tensor(x)), atol=1e-4, name="torch vs oneflow resnet18")


def test_transfer_to_different_arch_names_keys(torch_resnet):
    other = models.build_classifier("torch", "resnet34", num_classes=CLASSES)
    with pytest.raises(KeyError) as info:
        models.transfer_weights(torch_resnet, other)
    msg = str(info.value)
    assert "missing" in msg and "layer1.2" in msg  # resnet34 has a third block in layer1


def test_transfer_with_wrong_num_classes_names_shape(torch_resnet):
    other = models.build_classifier("torch", "resnet18", num_classes=10)
    with pytest.raises(ValueError) as info:
        models.transfer_weights(torch_resnet, other)
    msg = str(info.value)
    assert "fc." in msg and "(8, 512)" in msg and "(10, 512)" in msg


def test_missing_weight_is_named(torch_mod, torch_resnet):
    state = models.state_dict_numpy(torch_resnet)
    state.pop("fc.bias")
    dst = models.build_classifier("torch", "resnet18", num_classes=CLASSES)
    before = dst.fc.bias.detach().clone()
    with pytest.raises(KeyError, match="missing fc.bias; unexpected none"):
        models.load_numpy_state(dst, state)
    assert torch_mod.equal(dst.fc.bias.detach(), before)  # nothing loaded


def test_embedder_twin_is_normalised_and_matches(torch_mod, flow):
    torch_mod.manual_seed(2)
    src = models.build_embedder("torch", dim=16, width_mult=0.25).eval()
    dst = models.twin(src, "oneflow", models.build_embedder, dim=16, width_mult=0.25)
    assert not dst.training
    x = _input(batch=2, seed=2)
    with torch_mod.no_grad():
        ref = src(torch_mod.from_numpy(x))
    assert tuple(ref.shape) == (2, 16)
    np.testing.assert_allclose(ref.norm(dim=1).numpy(), 1.0, atol=1e-5)
    assert_outputs_close(dst(flow.tensor(x)), ref, atol=1e-4, name="embedder twin")
    with pytest.raises(ValueError, match="dim"):
        models.build_embedder("torch", dim=0)


def test_calibrate_batchnorm_makes_outputs_depend_on_input(torch_mod, flow):
    torch_mod.manual_seed(0)
    emb = models.build_embedder("torch", 16, 0.25).eval()
    x = torch_mod.from_numpy(_input(8, seed=1) * 3 + 1)

    def spread(module, inputs):
        with torch_mod.no_grad():
            out = module(inputs).numpy()
        return float(out.std(axis=0).mean())

    before = spread(emb, x)
    bn = next(m for m in emb.modules() if isinstance(m, torch_mod.nn.BatchNorm2d))
    momentum = bn.momentum
    models.calibrate_batchnorm(emb, x)
    assert not emb.training and bn.momentum == momentum  # eval mode and momentum restored
    # with the batch's own statistics, embeddings of different inputs differ (before, they nearly coincide)
    assert spread(emb, x) > 10 * before
    fr = models.build_classifier("oneflow", "resnet18", num_classes=CLASSES)
    models.calibrate_batchnorm(fr, flow.tensor(_input(4)))
    assert not fr.training
    with pytest.raises(ValueError, match="at least 2 inputs"):
        models.calibrate_batchnorm(emb, x[:1])
    with pytest.raises(ValueError, match="no BatchNorm"):
        models.calibrate_batchnorm(torch_mod.nn.Linear(3, 3), x)
