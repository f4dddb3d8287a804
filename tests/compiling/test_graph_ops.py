"""helpers.compiling.graph_ops: op counts of OneFlow graphs and torch.fx graphs, and their differences."""

from __future__ import annotations

import pytest

from helpers.compiling import graph_ops


def test_fx_op_counts(torch_mod):
    nn = torch_mod.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return torch_mod.relu(self.bn(self.conv(x))).flatten(1) + 1

    counts = graph_ops.fx_op_counts(Net())
    assert counts == {"BatchNorm2d": 1, "Conv2d": 1, "add": 1, "flatten": 1, "relu": 1}
    gm = torch_mod.fx.symbolic_trace(Net())
    assert graph_ops.fx_op_counts(gm) == counts
    assert graph_ops.total(counts) == 5
    with pytest.raises(TypeError, match="torch.nn.Module"):
        graph_ops.fx_op_counts("conv")


def test_oneflow_op_counts(flow):
    lin = flow.nn.Sequential(flow.nn.Linear(4, 3), flow.nn.ReLU())

    class G(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = lin

        def build(self, x):
            return self.m(x) + 1

    g = G()
    with pytest.raises(RuntimeError, match="not been compiled"):
        graph_ops.oneflow_op_counts(g)
    g(flow.ones(2, 4))
    counts = graph_ops.oneflow_op_counts(g)
    assert counts.get("relu") == 1 and "variable" not in counts
    assert "relu" in graph_ops.oneflow_op_counts(g, stage="traced")
    with pytest.raises(ValueError, match="stage"):
        graph_ops.oneflow_op_counts(g, stage="optimised")
    with pytest.raises(TypeError, match="nn.Graph"):
        graph_ops.oneflow_op_counts(lin)


def test_op_diff():
    rows = graph_ops.op_diff(
        {"conv": 20, "bn": 20, "relu": 17}, {"conv": 20, "relu": 17, "cast": 2}
    )
    assert rows == [
        {"op": "bn", "before": 20, "after": 0, "change": -20},
        {"op": "cast", "before": 0, "after": 2, "change": 2},
    ]
    assert graph_ops.op_diff({"a": 1}, {"a": 1}) == [] and graph_ops.total({}) == 0
    with pytest.raises(TypeError, match="mapping"):
        graph_ops.op_diff([("a", 1)], {})
    with pytest.raises(ValueError, match="non-negative ints"):
        graph_ops.op_diff({"a": -1}, {})
