"""helpers.core.threads: the same CPU threads for every framework of a comparison."""

# course-test-group: no-oneflow
# (an imported OneFlow is a stand-in module here: OneFlow 0.9.0 has no getter to read back)

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from helpers.core import threads


def test_same_threads_sets_every_framework(monkeypatch, torch_mod):
    monkeypatch.delenv(threads.ONEFLOW_THREADS_ENV, raising=False)
    saved = torch_mod.get_num_threads()
    try:
        torch_mod.set_num_threads(2)  # something else first, so the call must change it
        assert threads.same_threads(1) == 1
        assert torch_mod.get_num_threads() == 1
        import os

        assert os.environ[threads.ONEFLOW_THREADS_ENV] == "1"  # for a OneFlow started after this
        assert threads.framework_threads("oneflow") == 1
        assert threads.same_threads() == threads.available_cores()  # default: every core we may use
    finally:
        torch_mod.set_num_threads(saved)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            threads.same_threads(bad)


def test_same_threads_sets_an_imported_oneflow(monkeypatch, torch_mod):
    """An already imported OneFlow gets ``set_num_threads(n)`` (a spy: it has no getter), and
    the count the measurements record is the one it was given."""
    monkeypatch.delenv(threads.ONEFLOW_THREADS_ENV, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    given = []
    monkeypatch.setitem(sys.modules, "oneflow", SimpleNamespace(set_num_threads=given.append))
    saved = torch_mod.get_num_threads()
    try:
        assert threads.same_threads(1) == 1
        assert given == [1] and torch_mod.get_num_threads() == 1
        assert threads.framework_threads("oneflow") == 1
    finally:
        torch_mod.set_num_threads(saved)


def test_oneflow_threads_default_and_env(monkeypatch):
    monkeypatch.delenv(threads.ONEFLOW_THREADS_ENV, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert (
        threads.framework_threads("oneflow") == 1
    )  # OneFlow's own rule: CPUs minus two, at least one
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 8)
    assert threads.framework_threads("oneflow") == 6
    monkeypatch.setenv(threads.ONEFLOW_THREADS_ENV, "3")
    assert threads.framework_threads("oneflow") == 3


def test_framework_threads_reads_torch(torch_mod):
    assert threads.framework_threads("torch") == torch_mod.get_num_threads()
    assert threads.framework_threads("onnxruntime") is None  # per session: the caller says
    from helpers.measure.timer import benchmark

    m = benchmark(lambda: None, framework="torch", repeats=2)
    assert m.threads == torch_mod.get_num_threads()
