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
    rep.assert_close(atol=1e-5, min_cosine=0.999999, min_topk={1: 1.0})
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
    rep.assert_close(atol=2e-3)
    with pytest.raises(
        AssertionError,
        match=r"candidate: max abs error 0.001 exceeds atol=0.0001 \+ rtol=0\*max\|ref\|",
    ):
        rep.assert_close(atol=1e-4)
    with pytest.raises(ValueError, match="atol must be a finite number >= 0"):
        rep.assert_close(atol=-1)


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
    with pytest.raises(AssertionError, match="top-5 agreement was not measured"):
        alignment.alignment_report(ref, cand, _x(2)).assert_close(atol=1, min_topk={5: 1.0})


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
    rep.assert_close(atol=1e-5, min_topk={1: 1.0})


def _report(*errors: float) -> alignment.AlignmentReport:
    """A report without models: candidate ``c<i>`` is the reference plus ``errors[i]``."""
    from helpers.core.comparison import compare

    ref = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    rep = alignment.AlignmentReport("ref", len(ref))
    for i, err in enumerate(errors):
        out = ref + err
        rep.rows.append(
            alignment.AlignmentRow(
                f"c{i}", compare(out, ref, topk=(1,)), np.abs(out - ref).ravel(), 3.0
            )
        )
    return rep


def test_assert_close_names_must_name_candidates():
    rep = _report(1e-6, 5.0)  # c0 close, c1 far off
    rep.assert_close(atol=1e-5, names=["c0"])  # only c0 is checked
    rep.assert_close(atol=1e-5, names="c0")  # one name as a plain string
    with pytest.raises(AssertionError, match="c1: max abs error 5"):
        rep.assert_close(atol=1e-5, names=["c0", "c1"])
    # a typo must not check nothing and pass: it names the unknown and the known candidates
    with pytest.raises(
        ValueError, match=r"names \['c_1'\] are not candidates.*candidates are \['c0', 'c1'\]"
    ):
        rep.assert_close(atol=1e-5, names=["c0", "c_1"])
    with pytest.raises(ValueError, match=r"not candidates"):
        rep.assert_close(atol=1e-5, names="c")  # not a substring match either
    with pytest.raises(ValueError, match="names is empty"):
        rep.assert_close(atol=1e-5, names=[])


@pytest.mark.parametrize(
    "kwargs, message",
    [  # atol=10 passes the far-off candidate, so only the bound under test could fail it
        (dict(atol=float("nan")), "atol must be a finite number"),
        (dict(atol=float("inf")), "atol must be a finite number"),
        (dict(atol=1e-5, rtol=float("nan")), "rtol must be a finite number"),
        (dict(atol=10, min_cosine=float("nan")), "min_cosine must be a finite number"),
        (dict(atol=10, min_cosine=-float("inf")), "min_cosine must be a finite number"),
        (dict(atol=10, min_cosine=1.5), r"min_cosine must be a finite number >= -1.0 <= 1.0"),
        (dict(atol=10, min_topk={1: float("nan")}), r"min_topk\[1\] must be a finite number"),
        (dict(atol=10, min_topk={1: 2.0}), r"min_topk\[1\] must be a finite number >= 0.0 <= 1.0"),
        (dict(atol=10, min_topk={0: 1.0}), "min_topk keys must be positive ints"),
        (dict(atol="1e-5"), "atol must be a finite number"),
    ],
)
def test_assert_close_rejects_bounds_that_could_never_fail(kwargs, message):
    rep = _report(5.0)  # far off: cosine 0.96, top-1 agreement 100%
    with pytest.raises(AssertionError, match="cosine 0.96"):
        rep.assert_close(atol=10, min_cosine=0.99)  # a finite bound does fail it
    with pytest.raises(ValueError, match=message):
        rep.assert_close(**kwargs)


def test_assert_close_bounds_the_worst_element_not_the_mean(pair):
    """Catches M19 (``assert_close`` compares the mean |error| with the bound): one element off
    by 1e-2 among exact ones fails atol=2e-3 although the mean error is far below it."""
    ref, _ = pair

    def spiked(a):
        out = np.array(predict.predict_batched(ref, a), copy=True)
        out[0, 0] += 1e-2
        return out

    rep = alignment.alignment_report(ref, spiked, _x(4))
    assert rep.rows[0].comparison.mean_abs < 2e-3
    with pytest.raises(AssertionError, match="max abs error"):
        rep.assert_close(atol=2e-3)
