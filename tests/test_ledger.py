"""helpers.core.ledger: recording and loading measurements (always in a temporary folder here)."""

from __future__ import annotations

import json
import math

import pytest

from helpers.core import ledger


def test_ledger_dir_follows_env(results_dir):
    assert ledger.ledger_dir() == results_dir
    assert results_dir.is_dir()
    assert (ledger.repo_root() / "_toc.yml").exists()


def test_record_and_load(results_dir):
    rec = ledger.record("ch00", "eager_ms", 12.5, "ms", batch=8)
    assert rec["value"] == 12.5 and rec["unit"] == "ms" and rec["batch"] == 8
    assert rec["mode"] in ("quick", "full") and "cpu" in rec["machine"]
    stored = json.loads((results_dir / "ch00.json").read_text())
    assert stored[0]["name"] == "eager_ms"
    assert ledger.load("ch00")[0]["value"] == 12.5
    assert ledger.lookup("ch00", "eager_ms")["batch"] == 8
    assert ledger.lookup("ch00", "never") is None
    assert ledger.load("ch99") == []


def test_record_replaces_same_name_and_load_all(results_dir):
    ledger.record("ch01", "speedup", 1.0, "x")
    ledger.record("ch01", "speedup", 2.0, "x")
    ledger.record("ch01", "other", 3, "x")
    ledger.record("ch02", "fps", 400.0, "images/s")
    recs = ledger.load("ch01")
    assert len(recs) == 2 and ledger.lookup("ch01", "speedup")["value"] == 2.0
    assert {r["chapter"] for r in ledger.load()} == {"ch01", "ch02"}
    assert len(ledger.load(folder=results_dir)) == 3


def test_record_accepts_numpy_scalars():
    import numpy as np

    assert ledger.record("ch00", "f32", np.float32(1.5), "ms")["value"] == 1.5
    rec = ledger.record("ch00", "i64", np.int64(3), "count")
    assert rec["value"] == 3.0 and isinstance(rec["value"], float)
    assert ledger.lookup("ch00", "f32")["value"] == 1.5


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "12", None, True, float("nan")])
def test_record_rejects_non_finite_values(value):
    with pytest.raises(ValueError, match="finite number"):
        ledger.record("ch00", "x", value, "ms")


@pytest.mark.parametrize(
    "chapter, name",
    [("ch00", "a/b"), ("ch00", "a\\b"), ("../ch", "x"), ("", "x"), ("ch00", ".hidden")],
)
def test_record_rejects_path_like_names(chapter, name, results_dir):
    with pytest.raises(ValueError, match="path separators"):
        ledger.record(chapter, name, 1.0, "ms")
    assert not any(results_dir.parent.rglob("*.json"))


def test_corrupt_ledger_file_is_a_clear_error(results_dir):
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ledger.load("bad")
    (results_dir / "dict.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="list of records"):
        ledger.load("dict")


def test_quick_and_full_mode_records_never_share_a_folder(monkeypatch, tmp_path):
    from helpers.core.environment import MODE_ENV

    monkeypatch.delenv(ledger.RESULTS_ENV, raising=False)
    monkeypatch.setattr(ledger, "repo_root", lambda: tmp_path)
    monkeypatch.setenv(MODE_ENV, "quick")
    quick = ledger.ledger_dir()
    ledger.record("ch", "x", 1.0, "s")
    monkeypatch.setenv(MODE_ENV, "full")
    full = ledger.ledger_dir()
    assert quick == tmp_path / "results" / "local" / "quick" and full.name == "full"
    assert ledger.lookup("ch", "x") is None  # the quick-mode number is not seen in full mode
    monkeypatch.setenv(MODE_ENV, "quick")
    assert ledger.lookup("ch", "x")["value"] == 1.0


def test_record_names_device_precision_and_threads(results_dir):
    rec = ledger.record("ch", "y", 2.0, "ms", device="cpu", precision="fp32")
    assert (rec["device"], rec["precision"]) == ("cpu", "fp32")
    assert "torch_threads" in rec
    bare = ledger.record("ch", "z", 2.0, "ms")
    assert bare["device"] is None and bare["precision"] is None
