"""helpers.show.plots: every figure function returns an Axes and rejects empty input."""

# course-test-group: no-oneflow
# ("oneflow" is only a curve's label here)

from __future__ import annotations

from types import SimpleNamespace as Event

import pytest

from helpers.measure.measurement import Measurement
from helpers.show import plots


@pytest.fixture(scope="module")
def axes_cls():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    return Axes


def _m(label, ms):
    return Measurement(label, [v / 1e3 for v in ms])


def test_latency_distribution(axes_cls):
    ax = plots.plot_latency_distribution(
        [_m("eager", [1, 2, 3, 4, 5]), _m("graph", [0.5, 0.7, 0.9])]
    )
    assert isinstance(ax, axes_cls)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["eager", "graph"]
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_latency_distribution([])


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
    ax = plots.plot_sweep(
        [1, 2, 4],
        {"latency": [1.0, 1.5, 2.5]},
        xlabel="batch",
        ylabel="ms",
        right={"throughput": [100, 130, 160]},
        right_label="img/s",
    )
    assert isinstance(ax, axes_cls) and ax.get_xlabel() == "batch"
    with pytest.raises(ValueError, match="points"):
        plots.plot_sweep([1, 2], {"bad": [1.0]}, xlabel="x", ylabel="y")


def test_sweep_rejects_empty():
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_sweep([], {}, xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_sweep([1, 2], {}, xlabel="x", ylabel="y")


def test_stage_breakdown(axes_cls):
    ax = plots.plot_stage_breakdown({"decode": 0.002, "network": 0.006})
    assert isinstance(ax, axes_cls)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["decode (25%)", "network (75%)"]
    with pytest.raises(ValueError, match="positive"):
        plots.plot_stage_breakdown({})
    with pytest.raises(ValueError, match="positive"):
        plots.plot_stage_breakdown({"a": 0.0})


def test_timeline(axes_cls):
    events = [
        Event(lane="process 0", stage="load", start=10.0, end=10.1),
        Event(lane="process 0", stage="infer", start=10.1, end=10.3),
        Event(lane="process 1", stage="load", start=10.1, end=10.2),
    ]
    ax = plots.plot_timeline(events, title="pipeline")
    assert isinstance(ax, axes_cls)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["process 0", "process 1"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["load", "infer"]
    assert len(ax.patches) == 3 and min(p.get_x() for p in ax.patches) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="no events"):
        plots.plot_timeline([])
    with pytest.raises(ValueError, match="ends before"):
        plots.plot_timeline([Event(lane="a", stage="load", start=2.0, end=1.0)])


def test_grouped_bars(axes_cls):
    groups = {
        "batch 1": {"eager": 100.0, "ORT": 200.0},
        "batch 8": {"eager": 300.0, "ORT": 500.0, "OpenVINO": 700.0},
    }
    ax = plots.plot_grouped_bars(groups, ylabel="images/s")
    assert isinstance(ax, axes_cls)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["batch 1", "batch 8"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(legend) == {"eager", "ORT", "OpenVINO"}
    assert (
        len(ax.patches) == 6
    )  # 3 series x 2 groups; the missing OpenVINO bar at batch 1 is a NaN gap
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_grouped_bars({}, ylabel="x")


def test_speed_accuracy(axes_cls):
    pts = [
        {"label": "fp32", "speed": 100.0, "accuracy": 0.9},
        {"label": "int8", "speed": 300.0, "accuracy": 0.89},
    ]
    ax = plots.plot_speed_accuracy(pts, title="t")
    assert isinstance(ax, axes_cls)
    assert [t.get_text() for t in ax.texts] == ["fp32", "int8"]
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_speed_accuracy([])
    with pytest.raises(ValueError, match="lacks"):
        plots.plot_speed_accuracy([{"label": "x", "speed": 1.0}])
