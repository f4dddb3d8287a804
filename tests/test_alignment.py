"""helpers.porting.alignment (the one-call inference report) and chapter 2's aligned training."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from helpers.chapters import ch02_alignment as ch02
from helpers.porting import alignment
from helpers.workload import models, predict


def tiny_net(framework: str, classes: int = 4, dropout: float = 0.0):
    """A small conv net (conv, BatchNorm, ReLU, pool, linear) built the same way in either framework."""
    _, nn, _ = models.nn_namespace(framework)
    layers = [
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(8, classes))
    return nn.Sequential(*layers)


@pytest.fixture()
def pair(torch_mod, flow):
    torch_mod.manual_seed(0)
    ref = tiny_net("torch").eval()
    cand = models.transfer_weights(ref, tiny_net("oneflow")).eval()
    return ref, cand


def _x(n=12, size=8, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3, size, size)).astype(np.float32)


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
    with pytest.raises(ValueError, match="non-negative"):
        rep.assert_close(atol=-1)


def test_report_says_when_output_shapes_differ(torch_mod, flow):
    ref = tiny_net("torch", classes=4).eval()
    other = tiny_net("oneflow", classes=6).eval()
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


def test_batch_order_is_seeded_and_covers_epochs():
    a = ch02.batch_order(10, 7, 4, seed=3)
    b = ch02.batch_order(10, 7, 4, seed=3)
    assert a.shape == (7, 4) and np.array_equal(a, b)
    assert len(set(a[:2].ravel())) == 8  # within an epoch, no sample repeats
    assert not np.array_equal(a, ch02.batch_order(10, 7, 4, seed=4))
    with pytest.raises(ValueError, match="batch_size <= n"):
        ch02.batch_order(3, 1, 4)


def test_make_train_step_bad_inputs(torch_mod, pair):
    ref, _ = pair
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        ch02.make_train_step(ref, optimizer="lbfgs", lr=0.1)
    with pytest.raises(ValueError, match="need lr > 0"):
        ch02.make_train_step(ref, lr=0.0)
    with pytest.raises(ValueError, match="use_graph=True needs a OneFlow model"):
        ch02.make_train_step(ref, lr=0.1, use_graph=True)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_train_aligned_torch_vs_oneflow(torch_mod, flow, optimizer):
    torch_mod.manual_seed(1)
    x = _x(32, seed=1)
    y = (np.arange(32) % 4).astype(np.int64)
    ref, cand = tiny_net("torch"), tiny_net("oneflow")
    run = ch02.train_aligned(
        ref,
        cand,
        x,
        y,
        steps=6,
        batch_size=8,
        optimizer=optimizer,
        lr=0.01,
        val=(x[:16], y[:16]),
        progress=False,
    )
    assert run.reference.name == "torch" and run.candidate.name == "oneflow"
    assert run.batch_order.shape == (6, 8) and run.differences.shape == (6,)
    assert (
        abs(run.differences[0]) < 1e-5
    )  # same init, same batch: the first loss agrees to float32 rounding
    run.assert_within(first_step=1e-5, smoothed_bound=1e-3, window=3, max_accuracy_gap=0.2)
    assert run.prediction_agreement is not None and 0 <= run.prediction_agreement <= 1
    assert "per-step |loss difference|" in str(run.table()) and "<table" in run._repr_html_()
    fig = run.plot(bound=1e-3, floor=run)
    assert len(fig.axes) == 2
    assert len(run.plot(bound=1e-3, floor=run, window=3).axes) == 3


def test_candidate_changes_plant_an_optimizer_bug(torch_mod, flow):
    """A learning rate x 1.2 in the candidate only: the first loss still agrees (same forward
    pass), the later ones do not; an unknown key is refused."""
    torch_mod.manual_seed(1)
    x, y = _x(32, seed=1), (np.arange(32) % 4).astype(np.int64)
    kwargs = dict(steps=4, batch_size=8, optimizer="adam", lr=0.01, progress=False)
    same = ch02.train_aligned(tiny_net("torch"), tiny_net("oneflow"), x, y, **kwargs)
    ref = tiny_net("torch")
    bug = ch02.train_aligned(
        ref, tiny_net("oneflow"), x, y, candidate_changes={"lr": 0.012}, **kwargs
    )
    assert abs(bug.differences[0]) < 1e-5
    assert np.abs(bug.differences[1:]).max() > 100 * np.abs(same.differences[1:]).max()
    eps = ch02.train_aligned(
        ref, tiny_net("oneflow"), x, y, candidate_changes={"eps": 1e-6}, **kwargs
    )
    assert eps.candidate.losses[-1] != eps.reference.losses[-1]
    with pytest.raises(ValueError, match="may change lr, momentum, weight_decay, eps; got betas"):
        ch02.train_aligned(
            ref, tiny_net("oneflow"), x, y, candidate_changes={"betas": (0.8, 0.9)}, **kwargs
        )
    with pytest.raises(ValueError, match="eps > 0"):
        ch02.make_train_step(ref, optimizer="adam", lr=0.1, eps=0.0)


def test_shares_say_how_much_of_each_bound_was_used():
    curve = ch02.TrainingCurve("a", np.array([2.0, 1.8, 1.6, 1.5]), 0.5, None, 1.0)
    other = ch02.TrainingCurve("b", np.array([2.001, 2.2, 2.4, 2.5]), 0.4, None, 1.0)
    run = ch02.TrainingAlignment(curve, other, np.zeros((4, 1), int))
    used = run.shares(smoothed_bound=1.8, window=2, first_step=0.01, max_accuracy_gap=0.2)
    assert used == pytest.approx({"first step": 0.1, "moving averages": 0.5, "accuracy gap": 0.5})
    assert run.assert_within(smoothed_bound=1.8, window=2, first_step=0.01) == pytest.approx(
        {"first step": 0.1, "moving averages": 0.5}
    )
    assert run.shares(smoothed_bound=0.45, window=2)["moving averages"] == pytest.approx(2.0)
    assert run.shares(smoothed_bound=1, max_accuracy_gap=0.0)["accuracy gap"] == float("inf")


def test_train_aligned_graph_and_reused_reference(flow):
    flow.manual_seed(2)
    x, y = _x(16, seed=2), (np.arange(16) % 4).astype(np.int64)
    eager, start = tiny_net("oneflow"), tiny_net("oneflow")
    models.transfer_weights(eager, start)
    run = ch02.train_aligned(
        eager,
        tiny_net("oneflow"),
        x,
        y,
        steps=4,
        batch_size=8,
        lr=0.05,
        names=("eager", "graph"),
        use_graph=(False, True),
        progress=False,
    )
    run.assert_within(first_step=1e-6, smoothed_bound=1e-4, window=2)
    nudged = ch02.train_aligned(
        run.reference,
        start,
        x,
        y,
        steps=4,
        batch_size=8,
        lr=0.05,
        copy_init=False,
        perturb=1e-6,
        names=("eager", "nudged"),
        progress=False,
    )
    assert np.array_equal(nudged.reference.losses, run.reference.losses)  # reused, not retrained
    assert nudged.candidate.name == "nudged"
    with pytest.raises(ValueError, match="was trained with"):
        ch02.train_aligned(
            run.reference,
            tiny_net("oneflow"),
            x,
            y,
            steps=5,
            batch_size=8,
            lr=0.05,
            copy_init=False,
            names=("eager", "x"),
            progress=False,
        )
    with pytest.raises(ValueError, match="no weights to copy"):
        ch02.train_aligned(
            run.reference, tiny_net("oneflow"), x, y, steps=4, batch_size=8, lr=0.05, progress=False
        )


def test_train_aligned_bad_inputs(torch_mod, flow):
    x, y = _x(8), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="8 inputs but 7 labels"):
        ch02.train_aligned(tiny_net("torch"), tiny_net("oneflow"), x, y[:7], steps=1, batch_size=4)
    with pytest.raises(ValueError, match="dropout masks"):
        ch02.train_aligned(
            tiny_net("torch", dropout=0.5),
            tiny_net("oneflow", dropout=0.5),
            x,
            y,
            steps=1,
            batch_size=4,
        )
    with pytest.raises(ValueError, match="different names"):
        ch02.train_aligned(
            tiny_net("torch"), tiny_net("torch"), x, y, steps=1, batch_size=4, progress=False
        )
    with pytest.raises(KeyError, match="missing"):  # different architectures cannot share an init
        ch02.train_aligned(
            tiny_net("torch"),
            models.nn_namespace("oneflow")[1].Linear(3, 4),
            x,
            y,
            steps=1,
            batch_size=4,
        )


def test_assert_within_reports_divergence():
    curve = ch02.TrainingCurve("a", np.array([2.0, 1.8, 1.6, 1.5]), 0.5, None, 1.0)
    other = ch02.TrainingCurve("b", np.array([2.0, 2.2, 2.4, 2.5]), 0.2, None, 1.0)
    run = ch02.TrainingAlignment(curve, other, np.zeros((4, 1), int))
    np.testing.assert_allclose(run.differences, [0, 0.4, 0.8, 1.0])
    np.testing.assert_allclose(run.smoothed_differences(2), [0.2, 0.6, 0.9])
    with pytest.raises(
        AssertionError,
        match=r"moving averages of the losses differ by 0.9.*accuracies 50.0% and 20.0%",
    ):
        run.assert_within(smoothed_bound=0.5, window=2, max_accuracy_gap=0.1)
    run.assert_within(smoothed_bound=1.0, window=2, first_step=1e-9)
    with pytest.raises(ValueError, match="positive"):
        run.assert_within(smoothed_bound=0)
    with pytest.raises(ValueError, match="window must be a positive int"):
        run.smoothed_differences(0)
    no_acc = ch02.TrainingAlignment(
        ch02.TrainingCurve("a", curve.losses, None, None, 1.0), other, run.batch_order
    )
    with pytest.raises(AssertionError, match="accuracies were not measured"):
        no_acc.assert_within(smoothed_bound=5, max_accuracy_gap=0.1)


def test_perturb_weights(torch_mod):
    torch_mod.manual_seed(3)
    a = tiny_net("torch")
    b = copy.deepcopy(a)
    ch02.perturb_weights(b, 1e-3, seed=0)
    wa, wb = models.state_dict_numpy(a), models.state_dict_numpy(b)
    rel = max(
        float(np.abs(wb[k] - wa[k]).max() / (np.abs(wa[k]).max() + 1e-12))
        for k in wa
        if wa[k].dtype.kind == "f"
    )
    assert 0 < rel < 1e-2
    assert np.array_equal(wa["1.num_batches_tracked"], wb["1.num_batches_tracked"])
    with pytest.raises(ValueError, match="scale must be positive"):
        ch02.perturb_weights(b, 0.0)


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
        (dict(atol=10, min_cosine=1.5), r"min_cosine must lie in \[-1, 1\]"),
        (dict(atol=10, min_topk={1: float("nan")}), r"min_topk\[1\] must be a finite number"),
        (dict(atol=10, min_topk={1: 2.0}), r"min_topk\[1\] must be a fraction"),
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


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(smoothed_bound=float("nan")), "smoothed_bound must be a finite number"),
        (dict(smoothed_bound=float("inf")), "smoothed_bound must be a finite number"),
        (dict(smoothed_bound=1.0, first_step=float("nan")), "first_step must be a finite number"),
        (
            dict(smoothed_bound=1.0, max_accuracy_gap=float("nan")),
            "max_accuracy_gap must be a finite number",
        ),
        (dict(smoothed_bound=1.0, max_accuracy_gap=1.5), "max_accuracy_gap must be a fraction"),
        (dict(smoothed_bound=-1.0), "bounds must be positive, got smoothed_bound=-1.0"),
    ],
)
def test_assert_within_rejects_bounds_that_could_never_fail(kwargs, message):
    curve = ch02.TrainingCurve("a", np.array([2.0, 1.8, 1.6, 1.5]), 0.5, None, 1.0)
    other = ch02.TrainingCurve("b", np.array([2.5, 2.2, 2.4, 2.5]), 0.2, None, 1.0)
    run = ch02.TrainingAlignment(curve, other, np.zeros((4, 1), int))
    with pytest.raises(ValueError, match=message):
        run.assert_within(window=2, **kwargs)


def test_training_settings_reject_non_finite_values(torch_mod):
    model = tiny_net("torch")
    for kwargs, label in [
        (dict(lr=float("inf")), "lr"),
        (dict(lr=0.1, momentum=float("nan")), "momentum"),
        (dict(lr=0.1, weight_decay=float("nan")), "weight_decay"),
    ]:
        with pytest.raises(ValueError, match=f"{label} must be a finite number"):
            ch02.make_train_step(model, **kwargs)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        ch02.perturb_weights(model, float("inf"))


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
