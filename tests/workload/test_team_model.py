"""helpers.workload.team_model: the team's original PyTorch model, training loop and serving helpers."""

from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

from helpers.core.comparison import assert_outputs_close
from helpers.workload import models, team_model

# Chapter 1's migration: the team file's import lines and the lines that replace them.
EDITS = {
    "import torch": "import oneflow as torch",
    "import torch.nn.functional as F": "import oneflow.nn.functional as F",
    "import torchvision": "import flowvision as torchvision",
    "from torch import nn": "from oneflow import nn",
}


@pytest.fixture(scope="module")
def model(torch_mod):
    torch_mod.manual_seed(0)
    return team_model.BusinessModel("resnet18", num_classes=5, hidden=16).eval()


def test_model_structure_and_output(torch_mod, model):
    assert isinstance(model.backbone.fc, torch_mod.nn.Identity)
    assert model.head.fc1.in_features == 512 and model.head.fc2.out_features == 5
    keys = model.state_dict().keys()
    assert (
        "backbone.conv1.weight" in keys
        and "head.fc2.bias" in keys
        and "backbone.fc.weight" not in keys
    )
    out = model(torch_mod.zeros(2, 3, 32, 32))
    assert tuple(out.shape) == (2, 5)


def test_bad_arguments_and_inputs(torch_mod, model):
    with pytest.raises(ValueError, match="no model 'no_such_net'"):
        team_model.BusinessModel("no_such_net")
    assert team_model.BusinessModel("mobilenet_v3_small")(torch_mod.zeros(2, 3, 32, 32)).shape == (
        2,
        8,
    )  # any torchvision backbone: its last linear layer replaced by the head
    with pytest.raises(ValueError, match="num_classes and hidden"):
        team_model.BusinessModel("resnet18", num_classes=0)
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\)"):
        model(torch_mod.zeros(3, 32, 32))
    with pytest.raises(ValueError, match=r"\(batch, 3, height, width\)"):
        model(torch_mod.zeros(1, 1, 32, 32))


def test_predict_gives_probabilities(torch_mod, model):
    p = team_model.predict(model, torch_mod.randn(3, 3, 32, 32))
    assert tuple(p.shape) == (3, 5) and not p.requires_grad
    np.testing.assert_allclose(p.sum(dim=1).numpy(), 1.0, atol=1e-6)


def test_train_steps_lowers_the_loss_on_a_fixed_batch(torch_mod):
    torch_mod.manual_seed(1)
    m = team_model.BusinessModel("resnet18", num_classes=2, hidden=8, dropout=0.0)
    x = torch_mod.randn(4, 3, 32, 32)
    y = torch_mod.tensor([0, 1, 0, 1])
    losses = team_model.train_steps(m, x, y, steps=12, batch_size=4, lr=0.02)
    assert len(losses) == 12 and all(isinstance(v, float) for v in losses)
    assert losses[-1] < losses[0]  # memorising four images: the loss must fall
    assert not m.training  # the loop hands the model back in eval mode
    with pytest.raises(ValueError, match="4 images but 3 labels"):
        team_model.train_steps(m, x, y[:3], steps=1)
    with pytest.raises(ValueError, match="steps and batch_size"):
        team_model.train_steps(m, x, y, steps=0)


def test_zero_init_residual_starts_each_block_as_its_shortcut(torch_mod, model):
    """Chapter 2 trains the backbone this way: the residual branches' last BatchNorm at 0."""
    zi = team_model.BusinessModel("resnet50", num_classes=5, hidden=16, zero_init_residual=True)
    last = [b.bn3.weight for b in zi.backbone.modules() if hasattr(b, "bn3")]
    assert len(last) == 16 and all(float(w.abs().max()) == 0.0 for w in last)
    plain = [b.bn2.weight for b in model.backbone.modules() if hasattr(b, "conv2")]
    assert plain and all(float(w.min()) == 1.0 for w in plain)  # the default: ones


def test_compile_for_serving_wraps_lazily(torch_mod, model):
    compiled = team_model.compile_for_serving(model)  # compiles on the first call only: cheap here
    assert compiled is not model and callable(compiled)


def test_the_file_runs_on_oneflow_after_its_import_lines_change(torch_mod, flow, tmp_path):
    """Plain PyTorch on purpose: chapter 1's four import edits are all the migration it needs."""
    original = inspect.getsource(team_model)
    lines = original.splitlines()
    assert sorted(line for line in lines if line in EDITS) == sorted(EDITS)  # each once
    edited = tmp_path / "team_model_edited.py"
    edited.write_text("\n".join(EDITS.get(line, line) for line in lines) + "\n")
    spec = importlib.util.spec_from_file_location("team_model_edited_test", edited)
    fb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fb)
    torch_mod.manual_seed(0)
    ref = team_model.BusinessModel("resnet18", num_classes=4, hidden=8).eval()
    got = fb.BusinessModel("resnet18", num_classes=4, hidden=8).eval()
    assert models.framework_of(got) == "oneflow"
    models.transfer_weights(ref, got)
    x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch_mod.no_grad():
        expected = ref(torch_mod.from_numpy(x))
    assert_outputs_close(got(flow.tensor(x)), expected, atol=1e-4, name="edited team model")
    with pytest.raises(AttributeError, match="compile"):
        fb.compile_for_serving(got)  # OneFlow 0.9.0 has no torch.compile
