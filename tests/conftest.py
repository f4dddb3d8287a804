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
def flow():
    from helpers.core.environment import import_oneflow

    return import_oneflow()
