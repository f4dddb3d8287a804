"""helpers.core.comparison: to_numpy, compare, top-k agreement and assert_outputs_close."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.core import precision
from helpers.core.comparison import (
    assert_classifier_logits,
    assert_outputs_close,
    assert_task_level,
    bound_used,
    compare,
    to_numpy,
    topk_agreement,
)


def test_to_numpy_accepts_tensors_arrays_and_lists(torch_mod):
    """OneFlow tensors: in tests/core/test_comparison_oneflow.py, so this file runs without OneFlow."""
    ref = np.arange(6, dtype=np.float64).reshape(2, 3)
    for x in (ref, ref.tolist(), torch_mod.tensor(ref), torch_mod.tensor(ref).half()):
        out = to_numpy(x)
        assert out.dtype == np.float64 and out.shape == (2, 3)
        np.testing.assert_array_equal(out, ref)
    assert to_numpy(np.float32(2.5)) == 2.5 and to_numpy(3).shape == ()
    with pytest.raises(TypeError, match="cannot convert"):
        to_numpy({"a": 1})


def test_compare_identical_outputs():
    x = np.random.default_rng(0).normal(size=(4, 5))
    c = compare(x, x.copy(), topk=(1, 3))
    assert c.max_abs == 0 and c.mean_abs == 0 and c.max_rel == 0
    assert c.cosine == pytest.approx(1.0)
    assert c.topk == {1: 1.0, 3: 1.0}
    flat = " ".join(str(c).split())  # wrapped to the book's 88 columns
    assert "shape (4, 5)" in flat and "top-1 agreement 100.0%" in flat
    assert max(len(line) for line in str(c).splitlines()) <= 88


def test_compare_finds_worst_element():
    a = np.zeros((3, 4))
    b = np.zeros((3, 4))
    a[2, 1] = 0.5
    a[0, 0] = 0.1
    c = compare(a, b)
    assert c.worst_index == (2, 1)
    assert c.worst_values == (0.5, 0.0)
    assert c.max_abs == pytest.approx(0.5)
    assert c.mean_abs == pytest.approx(0.6 / 12)


def test_compare_different_shapes_names_both():
    with pytest.raises(ValueError) as info:
        compare(np.zeros((2, 3)), np.zeros((3, 2)))
    assert "(2, 3)" in str(info.value) and "(3, 2)" in str(info.value)


def test_compare_rejects_empty_and_nonfinite():
    with pytest.raises(ValueError, match="empty"):
        compare(np.zeros((0,)), np.zeros((0,)))
    with pytest.raises(ValueError, match="second"):
        compare(np.ones(3), np.array([1.0, np.nan, 1.0]))


def test_topk_agreement_hand_made():
    a = np.array(
        [
            [0.9, 0.1, 0.0, 0.0],  # top1 0, top2 {0,1}
            [0.1, 0.8, 0.3, 0.0],  # top1 1, top2 {1,2}
            [0.2, 0.1, 0.0, 0.7],  # top1 3, top2 {3,0}
            [0.0, 0.0, 0.6, 0.5],  # top1 2, top2 {2,3}
        ]
    )
    b = np.array(
        [
            [0.8, 0.0, 0.3, 0.0],  # top1 0 (agree), top2 {0,2} (differs)
            [0.3, 0.2, 0.9, 0.0],  # top1 2 (differs), top2 {2,0} (differs)
            [0.6, 0.0, 0.1, 0.7],  # top1 3 (agree), top2 {3,0} (agree)
            [0.0, 0.1, 0.4, 0.5],  # top1 3 (differs), top2 {3,2} (agree, order ignored)
        ]
    )
    assert topk_agreement(a, b, k=1) == pytest.approx(0.5)
    assert topk_agreement(a, b, k=2) == pytest.approx(0.5)
    assert topk_agreement(a, b, k=4) == 1.0
    assert topk_agreement(a, a, k=1) == 1.0


def test_topk_agreement_bad_inputs():
    with pytest.raises(ValueError, match="k must be"):
        topk_agreement(np.zeros((2, 3)), np.zeros((2, 3)), k=4)
    with pytest.raises(ValueError, match="samples, classes"):
        topk_agreement(np.zeros(3), np.zeros(3))


def test_assert_outputs_close_passes_and_returns_comparison():
    x = np.linspace(-1, 1, 10)
    cmp = assert_outputs_close(x + 1e-6, x, atol=1e-5, min_cosine=0.999)
    assert cmp.max_abs == pytest.approx(1e-6)
    # rtol loosens the bound in proportion to |expected|
    assert_outputs_close(np.array([100.01]), np.array([100.0]), atol=0.0, rtol=1e-3)


def test_assert_outputs_close_failure_message():
    expected = np.zeros((2, 3))
    actual = expected.copy()
    actual[1, 2] = 0.25
    actual[0, 1] = 0.01
    with pytest.raises(AssertionError) as info:
        assert_outputs_close(actual, expected, atol=0.001, name="logits")
    msg = str(info.value)
    assert "logits are not close" in msg
    assert "(1, 2)" in msg  # the worst index
    assert "atol=0.001" in msg  # the tolerance
    assert "2 of 6 elements" in msg


def test_assert_outputs_close_cosine_topk_and_bad_tolerance():
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[0.0, 1.0], [0.0, 1.0]])
    with pytest.raises(AssertionError, match="top-1 agreement 50.0%"):
        assert_outputs_close(a, b, atol=10.0, min_topk={1: 1.0})
    with pytest.raises(AssertionError, match="cosine"):
        assert_outputs_close(a, b, atol=10.0, min_cosine=0.99)
    with pytest.raises(ValueError, match="atol must be a finite number >= 0"):
        assert_outputs_close(a, a, atol=-1.0)


def test_rowwise_cosine_and_neighbours():
    from helpers.core.comparison import (
        max_cross_cosine,
        nearest_neighbour_agreement,
        rowwise_cosine,
    )

    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    np.testing.assert_allclose(rowwise_cosine(a, [[2.0, 0.0], [1.0, 1.0]]), [1.0, np.sqrt(0.5)])
    with pytest.raises(ValueError, match="zero norm"):
        rowwise_cosine(a, [[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="same shape"):
        rowwise_cosine(a, a[:1])
    ref = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert nearest_neighbour_agreement(ref + 0.1, ref) == 1.0
    assert nearest_neighbour_agreement(ref[[1, 0, 2]], ref) == pytest.approx(
        1 / 3
    )  # two rows swapped
    with pytest.raises(ValueError, match="two rows"):
        nearest_neighbour_agreement(ref[:1], ref[:1])
    assert max_cross_cosine(ref) == 0.0
    assert max_cross_cosine(np.array([[1.0, 0.0], [1.0, 1.0]])) == pytest.approx(np.sqrt(0.5))
    with pytest.raises(ValueError, match="samples >= 2"):
        max_cross_cosine(ref[:1])


@pytest.mark.parametrize(
    "bad",
    [
        {"atol": float("nan")},
        {"atol": 1e-3, "rtol": float("nan")},
        {"atol": 1e-3, "min_cosine": float("nan")},
        {"atol": float("inf")},
        {"atol": 1e-3, "min_cosine": 1.5},
        {"atol": 1e-3, "min_topk": {1: float("nan")}},
        {"atol": 1e-3, "min_topk": {1: 99}},
    ],
)
def test_assert_outputs_close_rejects_bounds_that_would_always_pass(bad):
    """A NaN bound compares False with everything: without the guard these checks could never fail."""
    x = np.array([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="must"):
        assert_outputs_close(x, x + 10.0, **bad)


def test_relative_bound_uses_the_magnitude_of_negative_references():
    """The bound is atol + rtol * |ref|: a negative reference gets its relative share too; an
    error 1.3 times the bound fails (a bound 1.5 times looser passed every other test)."""
    assert_outputs_close([-1.0], [-1.05], atol=0.0, rtol=0.1)
    with pytest.raises(AssertionError):
        assert_outputs_close([-1.0], [-1.15], atol=0.0, rtol=0.1)
    with pytest.raises(AssertionError):  # and a positive one, symmetric
        assert_outputs_close([1.0], [1.15], atol=0.0, rtol=0.1)


def test_mode_derived_bound_reports_how_much_of_it_was_used():
    ref = np.linspace(-2.0, 2.0, 50)
    tol = precision.tolerance("fp32", network="resnet18", scale=2.0)
    cmp = assert_outputs_close(ref + 0.5 * tol.atol, ref, mode="fp32", network="resnet18")
    assert 0.2 < cmp.used <= 0.5 and "of its fp32 bound" in str(cmp)
    with pytest.raises(AssertionError, match="differ by more than"):
        assert_outputs_close(ref + 3 * tol.atol, ref, mode="fp32", network="resnet18")
    with pytest.raises(ValueError, match="not both"):
        assert_outputs_close(ref, ref, mode="fp32", atol=1e-3)
    with pytest.raises(ValueError, match="give the bound"):
        assert_outputs_close(ref, ref)


def test_bound_used_is_what_the_assertion_reports_and_fails_above_one():
    ref = np.linspace(-2.0, 2.0, 50)
    tol = precision.tolerance("fp32", network="resnet18", scale=2.0)
    for error in (0.5, 3.0):  # within the bound, then a planted error of three bounds
        out = ref + error * tol.atol
        used = bound_used(out, ref, mode="fp32", network="resnet18")
        if error < 1:
            assert used == pytest.approx(
                assert_outputs_close(out, ref, mode="fp32", network="resnet18").used
            )
        else:
            assert used > 1
            with pytest.raises(AssertionError):
                assert_outputs_close(out, ref, mode="fp32", network="resnet18")
    with pytest.raises(ValueError, match="task level"):
        bound_used(ref, ref, mode="bf16")
    with pytest.raises(ValueError, match="different shapes"):
        bound_used(ref[:3], ref, mode="fp32")


def test_an_explicit_accumulation_reaches_the_bound_with_a_named_network():
    """``accumulation="op"`` with ``network`` named: the assertion and ``bound_used`` apply the
    one-layer bound, 64 times tighter than ResNet-101's; an error between the two fails."""
    ref = np.linspace(-2.0, 2.0, 50)
    op = precision.tolerance("fp32", accumulation="op", scale=2.0)
    out = ref + 4 * op.atol  # four one-layer bounds, inside ResNet-101's 64 of them
    kwargs = dict(mode="fp32", network="resnet101")
    assert bound_used(out, ref, **kwargs) < 0.1  # the control: the network's bound passes it
    assert_outputs_close(out, ref, **kwargs)
    assert bound_used(out, ref, accumulation="op", **kwargs) > 2
    with pytest.raises(AssertionError, match="differ by more than"):
        assert_outputs_close(out, ref, accumulation="op", **kwargs)
    cmp = assert_outputs_close(ref + 0.5 * op.atol, ref, accumulation="op", **kwargs)
    assert cmp.tolerance.accumulation == 8.0 and 0.2 < cmp.used <= 0.5


@pytest.mark.parametrize("mode", ["tf32", "bf16", "fp16", "int8"])
def test_no_elementwise_reduced_precision_bound_on_a_whole_network(mode):
    ref = np.ones(4)
    with pytest.raises(ValueError, match="task level"):
        assert_outputs_close(ref, ref, mode=mode)
    assert_outputs_close(ref, ref, mode=mode, accumulation="op")  # one layer: still a real bound


def _rows(n=16, dim=32, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim))


def test_task_level_passes_small_noise_and_its_controls_fail():
    ref = _rows()
    noisy = ref + 0.05 * _rows(seed=1)
    check = assert_task_level(noisy, ref, mode="bf16", name="embeddings")
    assert check.nearest_own == 1.0 and check.controls["negated"] < 1.0
    assert check.controls["shifted rows"] < 1.0 and "controls fail" in str(check)
    with pytest.raises(AssertionError, match="nearest their own reference"):
        assert_task_level(-noisy, ref, mode="bf16")  # a sign bug
    with pytest.raises(AssertionError, match="nearest their own reference"):
        assert_task_level(np.roll(noisy, 1, 0), ref, mode="bf16")  # responses out of order


def test_task_level_refuses_data_that_cannot_tell_right_from_wrong():
    same = np.tile(
        _rows(n=1), (8, 1)
    )  # every sample gives the same output: a model that learned nothing
    with pytest.raises(AssertionError, match="too alike"):
        assert_task_level(same, same, mode="int8")
    with pytest.raises(ValueError, match="NaN or inf"):
        assert_task_level(np.full((4, 3), np.nan), _rows(4, 3), mode="int8")
    with pytest.raises(ValueError, match="different shapes"):
        assert_task_level(_rows(4, 3), _rows(4, 4), mode="int8")


def test_task_level_keeps_the_decisions_the_precision_cannot_flip():
    ref = np.zeros((6, 4))
    ref[np.arange(6), np.arange(6) % 4] = 5.0  # six decided rows, margin 5
    ref += 0.01 * _rows(6, 4)
    check = assert_task_level(ref + 1e-3, ref, mode="bf16", logits=True, network="resnet18")
    assert check.decided == 6 and check.kept == 6
    flipped = ref.copy()
    flipped[0] = ref[0][::-1]  # one confident decision reversed, the row still nearest its own
    with pytest.raises(AssertionError, match="top-1 changed on 1 of 6"):
        assert_task_level(flipped, ref, mode="bf16", logits=True, network="resnet18")


def test_task_level_by_class_for_a_trained_classifier():
    """A trained classifier gives the images of one class nearly the same logits: a rounding
    that swaps two of them fails "nearest its own" but keeps every decision; ``by_class`` asks
    for the class, and still fails on negated logits and refuses a model deciding one class."""
    rng = np.random.default_rng(0)
    ref = np.repeat(6.0 * np.eye(8), 4, axis=0) + 1e-4 * rng.normal(size=(32, 8))
    got = ref + 1e-3 * rng.normal(size=ref.shape)  # larger than the gaps inside a class
    with pytest.raises(AssertionError, match="nearest their own reference"):
        assert_task_level(got, ref, mode="int8", logits=True, network="resnet18")
    check = assert_task_level(got, ref, mode="int8", logits=True, by_class=True, network="resnet18")
    assert check.nearest_own == 1.0 and check.by_class and "of its class" in str(check)
    with pytest.raises(AssertionError, match="a reference of their own class"):
        assert_task_level(-got, ref, mode="int8", logits=True, by_class=True, network="resnet18")
    one_class = np.tile([6.0] + [0.0] * 7, (8, 1)) + 1e-2 * rng.normal(size=(8, 8))
    # every row of one class: the controls land in that class too (catches M04, the control
    # refusal comparing ``v > 1.0`` instead of ``>=``, which never refuses)
    with pytest.raises(AssertionError, match="control"):
        assert_task_level(
            one_class, one_class, mode="int8", logits=True, by_class=True, network="resnet18"
        )
    with pytest.raises(ValueError, match="logits=True"):
        assert_task_level(got, ref, mode="int8", by_class=True)


def test_classifier_logits_rule_is_by_class_plus_accuracy():
    """The one rule for a classifier's reduced-precision logits: by class on the decided rows,
    decided top-1 kept, held-out accuracy within the stated drop; a row on a class boundary may
    land on either side; a drop beyond the bound fails with the points."""
    rng = np.random.default_rng(0)
    ref = np.repeat(6.0 * np.eye(8), 4, axis=0) + 1e-4 * rng.normal(size=(32, 8))
    got = ref + 1e-3 * rng.normal(size=ref.shape)  # swaps rows inside a class only
    labels = np.repeat(np.arange(8), 4)
    kw = dict(mode="int8", network="resnet18")
    check = assert_classifier_logits(got, ref, labels, **kw)
    assert check.by_class and check.accuracy_drop == 0.0
    assert "+0.00 points" in str(check) and "each decided row" in str(check)
    assert assert_classifier_logits(got, ref, **kw).accuracy_drop is None
    wrong = labels.copy()
    wrong[:2] = 7  # the reference now misses two images; the candidate misses them too
    assert assert_classifier_logits(got, ref, wrong, **kw).accuracy_drop == 0.0
    worse = got.copy()
    worse[0] = ref[4]  # image 0 of class 0 answered as class 1: a flipped decision
    with pytest.raises(AssertionError, match="accuracy 3.12 points below"):
        assert_classifier_logits(worse, ref, labels, max_drop=0.02, **kw)
    with pytest.raises(AssertionError, match="top-1 changed on 1 of 32"):
        assert_classifier_logits(worse, ref, labels, max_drop=0.05, **kw)
    edge_ref = ref.copy()
    edge_ref[0, :2] = [3.0, 2.99]  # image 0 on the boundary of classes 0 and 1: undecided
    edge = got.copy()
    edge[0] = edge_ref[4]  # it lands in class 1: counted, not required
    check = assert_classifier_logits(edge, edge_ref, max_drop=0.05, **kw)
    assert check.decided == 31 and check.nearest_own == 1.0 and check.nearest_own_all < 1.0
    with pytest.raises(ValueError, match="labels"):
        assert_classifier_logits(got, ref, labels[:3], **kw)


def test_an_actual_below_the_expected_fails_like_one_above():
    """Both directions count: without the abs() of the difference only a too-large actual failed
    (the mutation sample caught that only indirectly)."""
    y = np.ones((2, 3), dtype=np.float32)
    for sign in (1, -1):
        x = y + np.float32(sign * 1e-2)
        with pytest.raises(AssertionError, match="not close"):
            assert_outputs_close(x, y, mode="fp32")
        assert compare(x, y).max_abs == pytest.approx(1e-2, rel=1e-3)
    # a negative reference: the relative part of the bound scales with its magnitude
    assert_outputs_close(-y * np.float32(1 + 1e-7), -y, mode="fp32")


def test_task_level_shifted_control_pairs_each_row_with_another_image():
    """Catches M05 (the "shifted rows" control rolls the columns, not the rows): each row
    paired with the previous image's reference is never nearest its own."""
    ref = _rows()
    check = assert_task_level(ref + 0.05 * _rows(seed=1), ref, mode="bf16")
    assert check.controls == {"negated": 0.0, "shifted rows": 0.0}


@pytest.mark.parametrize("mode", ["tf32", "bf16", "fp16", "int8"])
def test_bound_used_refuses_every_reduced_mode_on_a_whole_network(mode):
    """Catches M09 (``bound_used`` refuses bf16/fp16/int8 but lets TF32 through, whose
    whole-network bound passes planted bugs); one layer's bound is still given."""
    ref = np.ones(4)
    with pytest.raises(ValueError, match="task level"):
        bound_used(ref, ref, mode=mode)
    assert bound_used(ref, ref, mode=mode, accumulation="op") == 0.0
