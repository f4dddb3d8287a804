"""tools/training_proxy.py: the pages' full-mode training recipes, on tiny sizes here."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import pytest

from helpers.core import environment

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def proxy(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "training_proxy", ROOT / "tools/training_proxy.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tiny = dataclasses.replace(
        environment.SIZES["full"], arch="resnet18", train_images=96, val_images=64, train_steps=2
    )
    monkeypatch.setitem(environment.SIZES, "full", tiny)
    return module


def test_each_recipe_is_the_pages(proxy):
    """Chapter 2: BusinessModel, zero-init, full steps of 32; chapter 8: 4x the steps of 64."""
    r2, r8 = proxy.run("ch2", 16), proxy.run("ch8", 16)
    assert (r2["net"], r2["zero_init"], r2["steps"], r2["batch"]) == ("BusinessModel", True, 2, 32)
    assert (r8["net"], r8["zero_init"], r8["steps"], r8["batch"]) == ("resnet", False, 8, 64)
    assert r2["needed"] == pytest.approx(0.125 + 3 * (0.125 * 0.875 / 64) ** 0.5)
    assert r8["needed"] == 0.5
    assert r2["learned"] == (r2["val_accuracy"] > r2["needed"])


def test_main_writes_every_recipe_and_fails_when_one_does_not_learn(proxy, tmp_path):
    out = tmp_path / "proxy.json"
    earlier = dict(proxy.RECIPES["ch8"], arch="resnet101", size=64, steps=1200, untrained=0.1)
    earlier |= dict(val_accuracy=0.9, needed=0.5, learned=True, loss_by_tenth=[2.2, 0.3])
    out.write_text(json.dumps({"recipes": {"ch8": earlier}}))  # an earlier run's, kept
    before = dict(os.environ)
    code = proxy.main(["--size", "16", "--only", "ch2", "--json", str(out)])
    assert dict(os.environ) == before  # nothing leaks into later tests (the book's build)
    doc = json.loads(out.read_text())
    assert set(doc["recipes"]) == {"ch2", "ch8"} and doc["machine"]["cores"] >= 1
    table = out.with_suffix(".md").read_text()
    assert "| ch2 | 02, cell 9 |" in table and "| 90.0% | 50.0% |" in table
    assert code == 1  # two steps of 32 images learn nothing: the page's recipe did not learn


def test_the_committed_run_is_why_chapter_2_zero_inits(proxy):
    """The committed proxy run: the page's recipes learned, the control without zero-init did
    not; its table is generated from its JSON."""
    (found,) = ROOT.glob("results/reference/*-full-cpu/training_proxy.json")
    doc = json.loads(found.read_text())
    learned = {name: r["learned"] for name, r in doc["recipes"].items()}
    assert learned == {"ch2": True, "ch2-default": False, "ch8": True}
    assert found.with_suffix(".md").read_text() == proxy.page(doc)
