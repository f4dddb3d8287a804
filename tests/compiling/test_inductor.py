"""helpers.compiling.inductor: an empty Inductor cache for a block, and its counters."""

from __future__ import annotations

import os

import pytest

from helpers.compiling import inductor


def test_empty_cache_points_inductor_at_the_folder_and_restores(tmp_path, monkeypatch):
    monkeypatch.setenv(inductor.CACHE_ENV, "/somewhere/else")
    with inductor.empty_cache(tmp_path / "cache") as folder:
        assert os.environ[inductor.CACHE_ENV] == str(folder) and folder.is_dir()
    assert os.environ[inductor.CACHE_ENV] == "/somewhere/else"
    monkeypatch.delenv(inductor.CACHE_ENV)
    with inductor.empty_cache(tmp_path / "again"):
        pass
    assert inductor.CACHE_ENV not in os.environ  # unset before, unset after


def test_empty_cache_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "kernel.so").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        with inductor.empty_cache(tmp_path / "old"):
            pass
    # torch 2.10 hands the path to g++ unquoted: a space would fail the first compile
    with pytest.raises(ValueError, match="whitespace"):
        with inductor.empty_cache(tmp_path / "with space"):
            pass


def test_a_compile_in_an_empty_cache_misses_then_a_second_hits(tmp_path, torch_mod):
    """The counters the chapter's check reads: a cold compile misses, the same graph again hits."""
    lin = torch_mod.nn.Linear(3, 2).eval()
    x = torch_mod.randn(4, 3)
    with inductor.empty_cache(tmp_path / "c"):
        before = inductor.cache_counters()
        torch_mod.compile(lin)(x)
        first = inductor.cache_counters()
        torch_mod._dynamo.reset()  # forget the compiled code: the next call compiles again
        torch_mod.compile(lin)(x)
        second = inductor.cache_counters()

    def grew(a, b, key):
        return b.get(key, 0) - a.get(key, 0)

    assert grew(before, first, "fxgraph_cache_miss") >= 1
    assert grew(first, second, "fxgraph_cache_hit") >= 1
    assert grew(first, second, "fxgraph_cache_miss") == 0
