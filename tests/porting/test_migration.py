"""helpers.porting.migration: mock_torch imports and the API-coverage scan.

Chapter 1 edits the import lines on its page; tests/workload/test_team_model.py runs the edited team file.
"""

from __future__ import annotations

import sys

import pytest

from helpers.porting import migration
from helpers.workload import team_model


def test_mock_torch_imports_unchanged_module_and_restores_torch(torch_mod, flow):
    mocked = migration.import_with_mock_torch(team_model, name="business_mock_test")
    m = mocked.BusinessModel("resnet18", num_classes=3, hidden=8).eval()
    assert isinstance(m, flow.nn.Module)
    assert tuple(m(flow.zeros(1, 3, 32, 32)).shape) == (1, 3)
    with pytest.raises(NotImplementedError, match="oneflow.compile is not implemented"):
        mocked.compile_for_serving(m)
    # outside the context the real PyTorch and torchvision are back
    import torch
    import torchvision

    assert torch is torch_mod and torch.nn.Linear.__module__.startswith("torch.")
    assert torchvision.__name__ == "torchvision" and "flowvision" not in repr(
        sys.modules["torchvision"]
    )


def test_mock_torch_without_torchvision_alias_fails_clearly(flow):
    mocked = migration.import_with_mock_torch(
        team_model, name="business_mock_noalias", alias_torchvision=False
    )
    with pytest.raises(TypeError, match="torch.nn.Module or None expected"):
        mocked.BusinessModel(
            "resnet18", num_classes=3
        )  # a real torchvision backbone cannot hold OneFlow parts


def test_mock_torch_context_yields_oneflow(flow):
    with migration.mock_torch() as inner:
        import torch as mocked_torch

        assert inner is flow
        assert type(mocked_torch.zeros(1)).__module__.startswith("oneflow")
    import torch

    assert type(torch.zeros(1)).__module__.startswith("torch")


def test_import_with_mock_torch_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Python source file"):
        migration.import_with_mock_torch(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="no source file"):
        migration.import_with_mock_torch(sys)  # a built-in module has no file
    good = tmp_path / "tiny.py"
    good.write_text("import torch\nX = torch.ones(1)\n")
    with pytest.raises(ValueError, match="identifier"):
        migration.import_with_mock_torch(good, name="bad-name")
    mod = migration.import_with_mock_torch(good, name="tiny_mock_test")
    assert type(mod.X).__module__.startswith("oneflow")


def test_api_usage_finds_what_oneflow_lacks(flow):
    rows = migration.api_usage(team_model)
    by_name = {r["api"]: r for r in rows}
    assert by_name["torch.compile"]["available"] is False
    assert rows[0]["api"] == "torch.compile"  # missing names come first
    for present in (
        "torch.nn.Linear",
        "torch.nn.functional.cross_entropy",
        "torch.optim.SGD",
        "torchvision.models",
    ):
        assert by_name[present]["available"], present
    assert (
        by_name["torch.nn.Linear"]["uses"] == 2
        and by_name["torch.nn.Linear"]["oneflow"] == "oneflow.nn.Linear"
    )
    assert migration.missing_apis(team_model) == ["torch.compile"]
    src = "import torch.fft as fft\nfrom torch.nn import Linear\ny = fft.rfft(torch.zeros(4))\n"
    assert set(migration.missing_apis(src)) == {"torch.fft.rfft"}
    assert migration.resolve("torch.nn.Linear") == (True, "oneflow.nn.Linear")
    assert migration.resolve("torch.fft")[0] is False
    with pytest.raises(ValueError, match="not a torch or torchvision name"):
        migration.resolve("numpy.zeros")


def test_api_usage_follows_unaliased_dotted_imports(flow):
    """``import torch.fft`` binds ``torch``: every use starts with the root name."""
    assert migration.missing_apis("import torch.fft\ny = torch.fft.rfft(torch.zeros(4))\n") == [
        "torch.fft.rfft"
    ]
    rows = migration.api_usage("import torch.nn\nm = torch.nn.Linear(2, 2)\n")
    assert [(r["api"], r["oneflow"], r["available"]) for r in rows] == [
        ("torch.nn.Linear", "oneflow.nn.Linear", True)
    ]
    rows = migration.api_usage("import torchvision.models\nnet = torchvision.models.resnet18()\n")
    assert [r["api"] for r in rows] == ["torchvision.models.resnet18"]
    rows = migration.api_usage("import torch\ny = torch.zeros(4).numpy\n")
    assert [r["api"] for r in rows] == ["torch.zeros"]  # a call's attribute is no torch name


def test_api_usage_bad_inputs():
    with pytest.raises(ValueError, match="not valid Python: line 1"):
        migration.api_usage("import torch as\n")
    with pytest.raises(TypeError, match="source text"):
        migration.api_usage(b"import torch")  # type: ignore[arg-type]
    assert migration.api_usage("import numpy as np\nx = np.zeros(1)\n") == []  # nothing to scan


def test_api_usage_reads_a_py_file_by_path(flow, tmp_path):
    """Chapter 1's exercise 1 invites "your own model file": a path works as a Path or as text."""
    src = "import torch\nfrom torch import nn\nm = nn.MultiheadAttention(8, 2)\nc = torch.compile\n"
    model_file = tmp_path / "my_model.py"
    model_file.write_text(src)
    from_text = migration.api_usage(src)
    assert migration.api_usage(model_file) == from_text
    assert migration.api_usage(str(model_file)) == from_text
    assert set(migration.missing_apis(model_file)) == {
        "torch.compile",
        "torch.nn.MultiheadAttention",
    }
    with pytest.raises(FileNotFoundError, match="no Python source file"):
        migration.api_usage(tmp_path / "absent.py")
    with pytest.raises(FileNotFoundError, match="no Python source file"):
        migration.api_usage(str(tmp_path / "absent.py"))
    # source text that merely mentions a file is still scanned as source
    assert migration.api_usage("import torch\nname = 'x.py'\n") == []
