"""tools/training_proxy.py: the pages' full-mode training recipes, on tiny sizes here."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import os
from pathlib import Path

import pytest

from helpers.core import environment

ROOT = Path(__file__).resolve().parents[2]


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


def _training_cell(stem: str) -> str:
    """The code cell of notebook ``stem`` that trains (``training.train_classifier``, or
    ``training.train_until_above_chance``, which runs it in rounds until above chance)."""
    cells = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
    calls = ("training.train_classifier(", "training.train_until_above_chance(")
    (src,) = [
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and any(k in "".join(c["source"]) for k in calls)
    ]
    return src


def test_each_recipe_is_the_pages(proxy):
    """The recipes copy their page's training cell: network, zero-init, steps and batch (a
    changed page fails here), and assert its bar."""
    from helpers.workload.training import train_classifier

    ch2, ch8 = _training_cell("02_precision_alignment"), _training_cell("08_int8_quantization")
    assert "team_model.BusinessModel(" in ch2 and "zero_init_residual=True" in ch2
    assert "steps=S.train_steps," in ch2 and "batch_size=32," in ch2
    assert 'models.build_classifier("torch", ARCH, num_classes=S.num_classes)' in ch8
    assert "steps=4 * S_train.train_steps, val=val_split" in ch8  # the default batch
    default_batch = inspect.signature(train_classifier).parameters["batch_size"].default
    want = {"ch2": ("BusinessModel", True, 1, 32), "ch8": ("resnet", False, 4, default_batch)}
    for name, recipe in want.items():
        r = proxy.RECIPES[name]
        assert (r["net"], r["zero_init"], r["times"], r["batch"]) == recipe, name
    assert proxy.RECIPES["ch2-default"] == proxy.RECIPES["ch2"] | {
        "zero_init": False, "page": proxy.RECIPES["ch2-default"]["page"]
    }  # fmt: skip
    bar = proxy.bar(proxy.RECIPES["ch2"]["bar"], 1024, 8)
    assert bar == pytest.approx(0.125 + 3 * (0.125 * 0.875 / 1024) ** 0.5)  # 15.6%
    assert proxy.bar(proxy.RECIPES["ch8"]["bar"], 1024, 8) == 0.5


def test_main_writes_every_recipe_and_fails_when_one_does_not_learn(proxy, tmp_path):
    out = tmp_path / "proxy.json"
    earlier = dict(proxy.RECIPES["ch8"], arch="resnet101", size=64, steps=1200, untrained=0.1)
    earlier |= dict(val_accuracy=0.9, needed=0.5, learned=True, loss_by_tenth=[2.2, 0.3])
    out.write_text(json.dumps({"recipes": {"ch8": earlier}}))  # an earlier run's, kept

    def course_env() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k.startswith("COURSE_")}

    before = course_env()
    code = proxy.main(["--size", "16", "--only", "ch2", "--json", str(out)])
    assert course_env() == before  # no mode leaks into later tests (the book's build)
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
