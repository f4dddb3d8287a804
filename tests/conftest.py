"""Shared test setup: headless matplotlib, tiny thread counts, and a private results folder."""

from __future__ import annotations

import matplotlib
import pytest

# Headless plots in this process only: an MPLBACKEND environment variable would also reach the
# notebook kernels nbval starts in the same session, and their figures would vanish from the book.
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def results_dir(tmp_path, monkeypatch):
    """Point the ledger at a temporary folder so no test writes into the repository's results/."""
    folder = tmp_path / "results"
    monkeypatch.setenv("COURSE_RESULTS_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test opened."""
    yield
    import sys

    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture(scope="session")
def torch_mod():
    import torch

    torch.set_num_threads(1)
    return torch


@pytest.fixture(scope="session")
def tiny_embedder_onnx(torch_mod):
    """A builder: ``(root, size, dim) -> (x, onnx_path)``, a tiny calibrated embedder in ONNX.

    The serving tests (one Triton server, and nginx in front of two) serve this model; ``x`` is
    8 random images of ``size`` px it was calibrated on, ``onnx_path`` its export (batch dynamic).
    """
    import numpy as np

    from helpers.deploy import export
    from helpers.workload import models

    def build(root, size, dim):
        torch_mod.manual_seed(0)
        x = np.random.default_rng(0).normal(size=(8, 3, size, size)).astype(np.float32)
        emb = models.build_embedder("torch", dim, 0.25)
        models.calibrate_batchnorm(emb, torch_mod.from_numpy(x))
        onnx_path = export.export_onnx(
            emb,
            torch_mod.from_numpy(x[:2]),
            root / "tiny.onnx",
            input_name="image",
            output_name="embedding",
        ).path
        return x, onnx_path

    return build


@pytest.fixture(scope="session")
def flow():
    from helpers.core.environment import import_oneflow

    return import_oneflow()


# ---- OneFlow tests run in a pytest process of their own (`make test` sets COURSE_TEST_GROUP) ----
# Not a crash guard (the Makefile's `test` target says why the split stays). The split is by file,
# because collecting a test file imports it (and some helpers import OneFlow at module level): a file
# that mentions OneFlow (`oneflow`, the `flow` fixture) belongs to the "oneflow" group, every other
# file to "no-oneflow". Without COURSE_TEST_GROUP everything runs.

TEST_GROUPS = ("oneflow", "no-oneflow")


def uses_oneflow(source: str) -> bool:
    """Whether a test file's source touches OneFlow."""
    import re

    return re.search(r"\boneflow\b|\bflow\b", source) is not None


def pytest_ignore_collect(collection_path, config):
    import os

    group = os.environ.get("COURSE_TEST_GROUP")
    if not group or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    if group not in TEST_GROUPS:
        raise pytest.UsageError(f"COURSE_TEST_GROUP must be one of {TEST_GROUPS}, got {group!r}")
    wanted = group == "oneflow"
    return True if uses_oneflow(collection_path.read_text(encoding="utf-8")) != wanted else None


class _FakeMachine:
    """Injectable readers: a wall clock, this process's CPU clock and /proc/stat, moved by hand."""

    def __init__(self, cpus=2, ticks=100):
        self.wall = 0.0
        self.own = 0.0  # this process's CPU seconds
        self.busy = 0.0  # all CPUs' busy seconds (/proc/stat reports whole ticks of them)
        self.steal = 0.0
        self.la = 1.0
        from helpers.measure import machine

        self.readers = machine._Readers(
            proc_stat=lambda: (round(self.busy * ticks), round(self.steal * ticks)),
            container_cpu_s=lambda: None,  # no container CPU quota: /proc/stat is read
            family_cpu_s=lambda: self.own,
            process_cpu_s=lambda: self.own,
            wall_s=lambda: self.wall,
            loadavg=lambda: self.la,
            clock_ticks=ticks,
            cpus=cpus,
        )

    def run(self, wall, own, others, steal=0.0):
        """Advance: `wall` seconds pass, we use `own` CPU seconds, others `others` (busy ticks)."""
        self.wall += wall
        self.own += own
        self.busy += own + others
        self.steal += steal


@pytest.fixture
def fake_machine() -> _FakeMachine:
    """A machine whose clocks and /proc/stat a test moves by hand (see ``helpers.measure.machine``)."""
    return _FakeMachine()
