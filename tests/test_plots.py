"""helpers.plots: every figure function returns an Axes and rejects empty input."""

from __future__ import annotations

import pytest

from helpers import plots
from helpers.benchmarking import Measurement


@pytest.fixture(scope="module")
def axes_cls():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    return Axes


def _m(label, ms):
    return Measurement(label, [v / 1e3 for v in ms])


def test_latency_distribution(axes_cls):
    ax = plots.plot_latency_distribution([_m("eager", [1, 2, 3, 4, 5]), _m("graph", [0.5, 0.7, 0.9])])
    assert isinstance(ax, axes_cls)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["eager", "graph"]
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_latency_distribution([])


def test_latency_distribution_uses_given_axes(axes_cls):
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    assert plots.plot_latency_distribution([_m("x", [1, 2])], ax=ax, unit="us") is ax


def test_speedups(axes_cls):
    ax = plots.plot_speedups(["graph", "amp"], [1.2, 1.5], reported=[1.25, None], title="t")
    assert isinstance(ax, axes_cls) and ax.get_title() == "t"
    assert isinstance(plots.plot_speedups(["a"], [2.0]), axes_cls)
    with pytest.raises(ValueError, match="same length"):
        plots.plot_speedups(["a", "b"], [1.0])
    with pytest.raises(ValueError, match="same length"):
        plots.plot_speedups(["a"], [1.0], reported=[1.0, 2.0])


def test_speedups_rejects_empty():
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_speedups([], [])


def test_sweep(axes_cls):
    ax = plots.plot_sweep([1, 2, 4], {"latency": [1.0, 1.5, 2.5]}, xlabel="batch", ylabel="ms",
                          right={"throughput": [100, 130, 160]}, right_label="img/s")
    assert isinstance(ax, axes_cls) and ax.get_xlabel() == "batch"
    with pytest.raises(ValueError, match="points"):
        plots.plot_sweep([1, 2], {"bad": [1.0]}, xlabel="x", ylabel="y")


def test_sweep_rejects_empty():
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_sweep([], {}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_sweep([1, 2], {}, xlabel="x", ylabel="y")


def test_loss_curves(axes_cls):
    ax = plots.plot_loss_curves({"torch": [2.0, 1.5, 1.0], "oneflow": [2.0, 1.4, 1.1]})
    assert isinstance(ax, axes_cls) and len(ax.get_lines()) == 2
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_loss_curves({})


def test_stage_breakdown(axes_cls):
    ax = plots.plot_stage_breakdown({"decode": 0.002, "network": 0.006})
    assert isinstance(ax, axes_cls)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["decode (25%)", "network (75%)"]
    with pytest.raises(ValueError, match="positive"):
        plots.plot_stage_breakdown({})
    with pytest.raises(ValueError, match="positive"):
        plots.plot_stage_breakdown({"a": 0.0})
