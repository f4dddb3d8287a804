"""helpers.workload.training: the quick classifier-training recipe (a tiny model on a tiny generated split)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.workload import data, training


@pytest.fixture()
def tiny(torch_mod, tiny_classifier):
    model = tiny_classifier(seed=0)
    train, val = data.make_splits(64, 32, 16, num_classes=4)
    return model, train, val


def test_training_lowers_the_loss_and_reports(tiny):
    model, train, val = tiny
    res = training.train_classifier(
        model, train, steps=30, batch_size=16, lr=1e-2, val=val, progress=False
    )
    assert res.steps == 30 and res.batch_size == 16 and np.isfinite(res.losses).all()
    assert res.losses[-5:].mean() < res.losses[:5].mean()  # it learns something
    assert 0.0 <= res.val_accuracy <= 1.0 and not model.training
    assert "30 steps" in str(res) and "held-out accuracy" in str(res)
    # where it ran and in what arithmetic: a training time is recorded with both
    assert (res.device, res.math_mode) == ("cpu", "fp32") and "on cpu (fp32)" in str(res)


def test_training_is_deterministic(tiny, torch_mod):
    model, train, _ = tiny
    state = {k: v.clone() for k, v in model.state_dict().items()}
    a = training.train_classifier(model, train, steps=5, batch_size=8, progress=False)
    model.load_state_dict(state)
    b = training.train_classifier(model, train, steps=5, batch_size=8, progress=False)
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-5)


def test_training_bad_inputs(tiny):
    model, train, _ = tiny
    with pytest.raises(TypeError, match="torch.nn.Module"):
        training.train_classifier(lambda x: x, train, steps=1)
    with pytest.raises(TypeError, match="Split"):
        training.train_classifier(model, (train.x, train.y), steps=1)
    with pytest.raises(ValueError, match="steps"):
        training.train_classifier(model, train, steps=0)
    with pytest.raises(ValueError, match="lr"):
        training.train_classifier(model, train, steps=1, lr=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        training.train_classifier(model, train, steps=1, batch_size=1000)
    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        training.train_classifier(model, train, steps=5, lr=1e30, progress=False)


def test_augment_batch_flips_and_shifts():
    rng = np.random.default_rng(0)
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    out = training.augment_batch(x, rng, max_shift=0)
    for a, b in zip(out, x):  # each image is either unchanged or mirrored left-right
        assert np.array_equal(a, b) or np.array_equal(a, b[:, :, ::-1])
    shifted = training.augment_batch(x, np.random.default_rng(3), max_shift=2)
    assert sorted(shifted.ravel()) == sorted(
        x.ravel()
    )  # a permutation of the pixels: nothing invented


def test_assert_above_chance():
    line = training.assert_above_chance(0.3, 256, 8, "resnet18")
    assert line == (
        "resnet18: held-out accuracy 30.0% > the bar 18.7% (chance 12.5% + 3 SE on 256 images)"
    )
    # 3 standard errors above 1/8 on 256 images: 12.5% + 3 * 2.07% = 18.7%
    with pytest.raises(AssertionError, match=r"18.0% <= the bar 18.7%.*256 images.*too little"):
        training.assert_above_chance(0.18, 256, 8, "resnet18")
    training.assert_above_chance(0.18, 4096, 8)  # more images, a smaller margin
    training.assert_above_chance(np.float32(0.3), 256, 8)  # NumPy's scalars are numbers too
    for bad in (30.0, float("nan"), True, "0.3"):
        with pytest.raises(ValueError, match="fraction"):
            training.assert_above_chance(bad, 256, 8)
    with pytest.raises(ValueError, match="classes >= 2"):
        training.assert_above_chance(0.9, 256, 1)
