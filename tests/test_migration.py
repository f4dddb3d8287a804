"""helpers.porting.migration: import rewriting, mock_torch imports and the API-coverage scan."""

from __future__ import annotations

import inspect
import sys

import numpy as np
import pytest

from helpers.core.comparison import assert_outputs_close
from helpers.porting import migration
from helpers.workload import models, team_model


def test_rewrite_imports_all_forms():
    src = (
        "import os\n"
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch import optim  # comment kept\n"
        "import torchvision, numpy as np\n"
        "import torch.nn.functional\n"
        "def f():\n"
        "    from torch.nn import functional as F\n"
        "    return F\n"
        "x = torch.zeros(1)\n"
    )
    rw = migration.rewrite_imports(src)
    new = rw.source.splitlines()
    assert new[0] == "import os"
    assert new[1] == "import oneflow as torch"
    assert new[2] == "import oneflow.nn as nn"
    assert new[3] == "from oneflow import optim  # comment kept"
    assert new[4] == "import flowvision as torchvision; import numpy as np"
    assert new[5] == "import oneflow.nn.functional; import oneflow as torch"
    assert new[7] == "    from oneflow.nn import functional as F"
    assert new[9] == "x = torch.zeros(1)"  # code other than imports is untouched
    assert [n for n, _, _ in rw.changes] == [2, 3, 4, 5, 6, 8]
    assert "- import torch\n+ import oneflow as torch" in rw.diff()


def test_rewrite_imports_bad_inputs():
    with pytest.raises(ValueError, match="imports neither torch nor torchvision"):
        migration.rewrite_imports("import numpy as np\nimport torchaudio_like\n")
    with pytest.raises(ValueError, match="not valid Python: line 1"):
        migration.rewrite_imports("import torch as\n")
    with pytest.raises(TypeError, match="source text"):
        migration.rewrite_imports(b"import torch")  # type: ignore[arg-type]
    # 'torchvision_extra' is another package, not torchvision
    with pytest.raises(ValueError, match="nothing to migrate"):
        migration.rewrite_imports("import torchvision_extra\n")


def test_load_source(flow):
    mod = migration.load_source(
        "import oneflow as torch\nVALUE = torch.ones(2).sum().item()\n", "tiny_mod_for_test"
    )
    assert mod.VALUE == 2.0 and sys.modules["tiny_mod_for_test"] is mod
    with pytest.raises(ValueError, match="identifier"):
        migration.load_source("x = 1", "not a name")
    with pytest.raises(ZeroDivisionError):
        migration.load_source("x = 1 / 0", "broken_mod_for_test")
    assert "broken_mod_for_test" not in sys.modules


def test_rewritten_business_module_runs_on_oneflow(torch_mod, flow):
    rw = migration.rewrite_imports(inspect.getsource(team_model))
    assert all(old.lstrip().startswith(("import", "from")) for _, old, _ in rw.changes)
    fb = migration.load_source(rw.source, "business_oneflow_test")
    torch_mod.manual_seed(0)
    ref = team_model.BusinessModel("resnet18", num_classes=4, hidden=8).eval()
    got = fb.BusinessModel("resnet18", num_classes=4, hidden=8).eval()
    assert models.framework_of(got) == "oneflow"
    models.transfer_weights(ref, got)
    x = np.random.default_rng(0).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch_mod.no_grad():
        expected = ref(torch_mod.from_numpy(x))
    assert_outputs_close(got(flow.tensor(x)), expected, atol=1e-4, name="rewritten business model")
    with pytest.raises(AttributeError, match="compile"):
        fb.compile_for_serving(got)  # OneFlow 0.9.0 has no torch.compile


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
