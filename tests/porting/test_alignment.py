"""helpers.porting.alignment: a port's outputs against the original's, in one report."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from tiny_models import images, tiny_classifier

from helpers.porting import alignment
from helpers.workload import models, predict


@pytest.fixture()
def pair(torch_mod, flow):
    torch_mod.manual_seed(0)
    ref = tiny_classifier("torch").eval()
    cand = models.transfer_weights(ref, tiny_classifier("oneflow")).eval()
    return ref, cand


def _x(n=12, size=8, seed=0):
    return images(n, size, seed)


def test_report_of_aligned_pair(pair, torch_mod):
    ref, cand = pair
    x = _x()
    ref64 = copy.deepcopy(ref).double()
    rep = alignment.alignment_report(
        ref64, {"torch32": ref, "oneflow": cand}, x, reference_name="float64", batch_size=5
    )
    assert rep.samples == 12 and [r.name for r in rep.rows] == ["torch32", "oneflow"]
    for row in rep.rows:
        assert 0 < row.comparison.max_abs < 1e-5  # float32 vs float64: rounding only
        assert row.comparison.topk == {1: 1.0}  # 4 classes: top-5 is skipped, top-1 kept
        assert (
            row.abs_errors.shape == (12 * 4,)
            and np.percentile(row.abs_errors, 99) <= row.comparison.max_abs
        )
    assert min(r.comparison.cosine for r in rep.rows) > 0.999999
    text = str(rep.table())
    assert (
        "12 samples" in text and "torch32" in text and "top1_agree" in text and "top5" not in text
    )
    assert "<table" in rep._repr_html_()
    assert rep["oneflow"].name == "oneflow"
    with pytest.raises(KeyError, match="no candidate named 'jax'"):
        rep["jax"]
    ax = rep.plot()
    assert "float64" in ax.get_xlabel() and len(ax.get_legend().get_texts()) == 3


def test_report_single_candidate_and_numpy_function(pair):
    ref, _ = pair
    x = _x(4)
    rep = alignment.alignment_report(ref, lambda a: predict.predict_batched(ref, a) + 1e-3, x)
    assert rep.rows[0].name == "candidate"
    assert rep.rows[0].comparison.max_abs == pytest.approx(1e-3, rel=1e-3)


def test_report_says_when_output_shapes_differ(torch_mod, flow):
    ref = tiny_classifier("torch", classes=4).eval()
    other = tiny_classifier("oneflow", classes=6).eval()
    with pytest.raises(
        ValueError, match=r"outputs differ in shape: PyTorch gives \(3, 4\), OneFlow gives \(3, 6\)"
    ):
        alignment.alignment_report(ref, {"OneFlow": other}, _x(3), reference_name="PyTorch")


def test_report_bad_inputs(pair):
    ref, cand = pair
    with pytest.raises(ValueError, match="at least one candidate"):
        alignment.alignment_report(ref, {}, _x(2))
    with pytest.raises(ValueError, match="non-empty batch"):
        alignment.alignment_report(ref, cand, np.zeros((0, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        alignment.alignment_report(ref, cand, _x(2), batch_size=0)
    with pytest.raises(TypeError, match="neither a model nor a callable"):
        alignment.alignment_report(ref, {"bad": 42}, _x(2))
    with pytest.raises(TypeError, match="single output tensor"):
        alignment.alignment_report(_TupleNet(ref), cand, _x(2))


class _TupleNet:
    """A torch-looking model that returns a tuple (not supported by the report)."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, x):
        return (self.inner(x),)

    def parameters(self):
        return self.inner.parameters()


# Make _TupleNet look like a torch object to framework_of.
_TupleNet.__module__ = "torch.fake"


def test_report_runs_oneflow_graph(pair, flow):
    from helpers.compiling import graphs

    ref, cand = pair
    graph = graphs.make_inference_graph(cand)
    rep = alignment.alignment_report(ref, {"graph": graph}, _x(8), batch_size=4)
    assert rep["graph"].comparison.max_abs < 1e-5 and rep["graph"].comparison.topk == {1: 1.0}


def test_report_shows_the_worst_element_not_the_mean(pair):
    """One element off by 1e-2 among exact ones: the report's max abs error is that element."""
    ref, _ = pair

    def spiked(a):
        out = np.array(predict.predict_batched(ref, a), copy=True)
        out[0, 0] += 1e-2
        return out

    rep = alignment.alignment_report(ref, spiked, _x(4))
    assert rep.rows[0].comparison.mean_abs < 2e-3
    assert rep.rows[0].comparison.max_abs == pytest.approx(1e-2, rel=1e-3)
