"""Fixtures of the deploy tests: a tiny classifier exported to ONNX."""

from __future__ import annotations

import pytest

from helpers.deploy import export


@pytest.fixture()
def tiny_onnx(torch_mod, tmp_path, tiny_classifier):
    model = tiny_classifier(seed=0).eval()
    x = torch_mod.randn(2, 3, 8, 8)
    path = export.export_onnx(model, x, tmp_path / "tiny.onnx", fold_constants=False).path
    with torch_mod.no_grad():
        want = model(x).numpy()
    return path, x.numpy(), want
