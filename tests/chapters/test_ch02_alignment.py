"""helpers.chapters.ch02_alignment: one model trained in two frameworks, step for step."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from tiny_models import images, tiny_classifier

from helpers.chapters import ch02_alignment as ch02
from helpers.workload import models


def _x(n=12, size=8, seed=0):
    return images(n, size, seed)


def _oneflow_twin(ref):
    """A OneFlow tiny model holding ``ref``'s weights (what train_aligned's candidate needs)."""
    cand = tiny_classifier("oneflow")
    models.transfer_weights(ref, cand)
    return cand


def test_batch_order_is_seeded_and_covers_epochs():
    a = ch02.batch_order(10, 7, 4, seed=3)
    b = ch02.batch_order(10, 7, 4, seed=3)
    assert a.shape == (7, 4) and np.array_equal(a, b)
    assert len(set(a[:2].ravel())) == 8  # within an epoch, no sample repeats
    assert not np.array_equal(a, ch02.batch_order(10, 7, 4, seed=4))
    with pytest.raises(ValueError, match="batch_size <= n"):
        ch02.batch_order(3, 1, 4)


def test_make_train_step_bad_inputs(torch_mod):
    ref = tiny_classifier(seed=0).eval()
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        ch02.make_train_step(ref, optimizer="lbfgs", lr=0.1)
    with pytest.raises(ValueError, match="need lr > 0"):
        ch02.make_train_step(ref, lr=0.0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_train_aligned_torch_vs_oneflow(torch_mod, flow, optimizer):
    torch_mod.manual_seed(1)
    x = _x(32, seed=1)
    y = (np.arange(32) % 4).astype(np.int64)
    ref = tiny_classifier("torch")
    run = ch02.train_aligned(
        ref,
        _oneflow_twin(ref),
        x,
        y,
        steps=6,
        batch_size=8,
        optimizer=optimizer,
        lr=0.01,
        val=(x[:16], y[:16]),
    )
    assert run.reference.name == "torch" and run.candidate.name == "oneflow"
    assert run.batch_order.shape == (6, 8) and run.differences.shape == (6,)
    assert (
        abs(run.differences[0]) < 1e-5
    )  # same init, same batch: the first loss agrees to float32 rounding
    run.assert_within(first_step=1e-5, smoothed_bound=1e-3, window=3, max_accuracy_gap=0.2)
    assert run.prediction_agreement is not None and 0 <= run.prediction_agreement <= 1
    assert "per-step |loss difference|" in str(run.table()) and "<table" in run._repr_html_()
    assert len(run.plot(bound=1e-3, floor=run, window=3).axes) == 3


def test_candidate_changes_plant_an_optimizer_bug(torch_mod, flow):
    """A learning rate x 1.2 in the candidate only: the first loss still agrees (same forward
    pass), the later ones do not; an unknown key is refused."""
    torch_mod.manual_seed(1)
    x, y = _x(32, seed=1), (np.arange(32) % 4).astype(np.int64)
    kwargs = dict(steps=4, batch_size=8, optimizer="adam", lr=0.01)
    ref = tiny_classifier("torch")
    start = copy.deepcopy(ref)  # the reference trains in place: the others start from here
    same = ch02.train_aligned(ref, _oneflow_twin(start), x, y, **kwargs)
    bug = ch02.train_aligned(
        same.reference, _oneflow_twin(start), x, y, candidate_changes={"lr": 0.012}, **kwargs
    )
    assert abs(bug.differences[0]) < 1e-5
    assert np.abs(bug.differences[1:]).max() > 100 * np.abs(same.differences[1:]).max()
    eps = ch02.train_aligned(
        same.reference, _oneflow_twin(start), x, y, candidate_changes={"eps": 1e-6}, **kwargs
    )
    assert eps.candidate.losses[-1] != eps.reference.losses[-1]
    with pytest.raises(ValueError, match="may change lr, momentum, eps; got betas"):
        ch02.train_aligned(
            start, _oneflow_twin(start), x, y, candidate_changes={"betas": (0.8, 0.9)}, **kwargs
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


def test_train_aligned_reuses_a_reference(flow):
    flow.manual_seed(2)
    x, y = _x(16, seed=2), (np.arange(16) % 4).astype(np.int64)
    eager, start, again = (tiny_classifier("oneflow") for _ in range(3))
    for other in (start, again):
        models.transfer_weights(eager, other)
    run = ch02.train_aligned(
        eager, again, x, y, steps=4, batch_size=8, lr=0.05, names=("eager", "again")
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
        perturb=1e-6,
        names=("eager", "nudged"),
    )
    assert np.array_equal(nudged.reference.losses, run.reference.losses)  # reused, not retrained
    assert nudged.candidate.name == "nudged"
    with pytest.raises(ValueError, match="was trained with"):
        ch02.train_aligned(
            run.reference, start, x, y, steps=5, batch_size=8, lr=0.05, names=("eager", "x")
        )


def test_train_aligned_bad_inputs(torch_mod, flow):
    x, y = _x(8), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="8 inputs but 7 labels"):
        ch02.train_aligned(
            tiny_classifier("torch"), tiny_classifier("oneflow"), x, y[:7], steps=1, batch_size=4
        )
    with pytest.raises(ValueError, match="dropout masks"):
        ch02.train_aligned(
            tiny_classifier("torch", dropout=0.5),
            tiny_classifier("oneflow", dropout=0.5),
            x,
            y,
            steps=1,
            batch_size=4,
        )
    with pytest.raises(ValueError, match="different names"):
        ch02.train_aligned(
            tiny_classifier("torch"),
            tiny_classifier("torch"),
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
    a = tiny_classifier("torch")
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
        (
            dict(smoothed_bound=1.0, max_accuracy_gap=1.5),
            "max_accuracy_gap must be a finite number >= 0.0 <= 1.0",
        ),
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
    model = tiny_classifier("torch")
    for kwargs, label in [
        (dict(lr=float("inf")), "lr"),
        (dict(lr=0.1, momentum=float("nan")), "momentum"),
    ]:
        with pytest.raises(ValueError, match=f"{label} must be a finite number"):
            ch02.make_train_step(model, **kwargs)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        ch02.perturb_weights(model, float("inf"))
