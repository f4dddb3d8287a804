"""helpers.compiling.graphs: chapter 3's nn.Graph classes, PyTorch static routes, compile-vs-steady timing.

Importing ``graphs`` imports OneFlow (the page's classes subclass ``flow.nn.Graph``): this file runs in the
OneFlow test group (tests/conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import images as _x
from tiny_models import tiny_classifier

from helpers.compiling import graphs
from helpers.core.comparison import assert_outputs_close
from helpers.workload import models


def small(framework: str):
    return tiny_classifier(framework, width=4, classes=3)


def test_inference_graph_matches_eager_and_needs_static_shapes(flow):
    m = small("oneflow").eval()
    g = graphs.make_inference_graph(m)
    assert isinstance(g, graphs.InferenceGraph) and isinstance(g, flow.nn.Graph)
    x = flow.tensor(_x())
    with flow.no_grad():
        ref = m(x)
    assert_outputs_close(g(x), ref, atol=1e-6, name="graph vs eager")
    direct = graphs.InferenceGraph(m)  # the constructor other helpers call
    assert_outputs_close(direct(x), ref, atol=1e-6, name="InferenceGraph(model) vs eager")
    with pytest.raises(Exception, match="static inputs tensor meta"):
        g(flow.tensor(_x(3))).numpy()  # compiled for batch 2


def test_train_graph_updates_weights_like_eager(flow):
    flow.manual_seed(0)
    eager = small("oneflow").train()
    static = models.transfer_weights(eager, small("oneflow")).train()
    x, y = flow.tensor(_x(4)), flow.tensor(np.array([0, 1, 2, 0]))
    opt_e = flow.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    g = graphs.TrainGraph(static, flow.optim.SGD(static.parameters(), lr=0.1, momentum=0.9))
    for _ in range(3):
        loss_e = flow.nn.functional.cross_entropy(eager(x), y)
        opt_e.zero_grad()
        loss_e.backward()
        opt_e.step()
        loss_g = g(x, y)
        assert abs(float(loss_e.numpy()) - float(loss_g.numpy())) < 1e-6
    we, wg = models.state_dict_numpy(eager), models.state_dict_numpy(static)
    diffs = {k: float(np.abs(we[k] - wg[k]).max()) for k in we}
    assert (
        diffs.pop("1.num_batches_tracked") == 3
    )  # the graph does not count BatchNorm steps (bookkeeping only)
    assert max(diffs.values()) < 1e-6


def test_train_graph_takes_a_loss_function(flow):
    m = small("oneflow").train()
    mse = flow.nn.MSELoss()
    g = graphs.TrainGraph(m, flow.optim.SGD(m.parameters(), lr=0.0), loss_fn=mse)
    x, y = flow.tensor(_x(4)), flow.zeros(4, 3)
    with flow.no_grad():
        ref = float(mse(m(x), y).numpy())  # lr 0: the step changes nothing
    assert abs(float(g(x, y).numpy()) - ref) < 1e-6


def test_make_inference_graph_refuses_wrong_objects(torch_mod, flow):
    with pytest.raises(TypeError, match="needs a OneFlow nn.Module, got a torch object"):
        graphs.make_inference_graph(small("torch"))
    with pytest.raises(TypeError, match="needs a OneFlow nn.Module"):
        graphs.make_inference_graph(lambda x: x)


def test_measure_static_separates_compile_from_steady_state(flow):
    m = small("oneflow").eval()
    x = flow.tensor(_x())
    fn, meas = graphs.measure_static(
        lambda: graphs.make_inference_graph(m),
        x,
        label="graph",
        framework="oneflow",
        items=2,
    )
    assert isinstance(fn, graphs.InferenceGraph)
    assert meas.first_call_s > meas.steady.median  # the first call compiled the graph
    assert meas.compile_s > 0 and len(meas.steady.times_s) == 1 and meas.steady.items == 2
    assert "first call" in str(meas) and meas.label == "graph"


def test_measure_static_bad_inputs():
    with pytest.raises(TypeError, match="build must be callable"):
        graphs.measure_static(42, label="x", framework="none")
    with pytest.raises(ValueError, match="first_calls must be a positive int"):
        graphs.measure_static(lambda: lambda: 1, label="x", framework="none", first_calls=0)
    with pytest.raises(TypeError, match="cannot be called"):
        graphs.measure_static(lambda: 42, label="x", framework="none")
    with pytest.raises(ValueError, match="unknown framework"):
        graphs.measure_static(lambda: lambda: 1, label="x", framework="jax")
    fn, meas = graphs.measure_static(lambda: lambda: 1, label="plain", framework="none")
    assert fn() == 1 and meas.compile_s >= 0


def test_with_steady_replaces_the_steady_state():
    from helpers.measure.measurement import Measurement

    _, meas = graphs.measure_static(
        lambda: lambda: 1, label="plain", framework="none", first_calls=2
    )
    meas = graphs.StaticMeasurement("s", build_s=1.0, first_call_s=0.5, steady=meas.steady)
    interleaved = Measurement("s steady", [0.1, 0.1, 0.1], items=4)
    out = graphs.with_steady(meas, interleaved)
    assert out.steady is interleaved and (out.build_s, out.first_call_s) == (1.0, 0.5)
    # compile cost counted against the new steady state, with the first calls of the original
    assert interleaved.meta["first_calls"] == 2
    assert out.compile_s == pytest.approx(1.0 + 0.5 - 2 * 0.1)
    with pytest.raises(TypeError, match="StaticMeasurement"):
        graphs.with_steady(interleaved, interleaved)
    with pytest.raises(TypeError, match="steady must be a Measurement"):
        graphs.with_steady(meas, [0.1])
