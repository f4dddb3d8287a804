"""helpers.workload.data: the generated dataset, normalisation, JPEG encode/decode, preprocessing."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.workload import data


def test_make_images_shapes_and_classes():
    images, labels = data.make_images(16, 32, seed=0)
    assert images.shape == (16, 32, 32, 3) and images.dtype == np.uint8
    assert labels.shape == (16,) and labels.dtype == np.int64
    assert set(labels.tolist()) == set(range(8))  # every class present
    _, few = data.make_images(6, 16, num_classes=3)
    assert set(few.tolist()) == {0, 1, 2}


def test_make_images_is_deterministic():
    a_img, a_lab = data.make_images(8, 24, seed=5)
    b_img, b_lab = data.make_images(8, 24, seed=5)
    c_img, _ = data.make_images(8, 24, seed=6)
    np.testing.assert_array_equal(a_img, b_img)
    np.testing.assert_array_equal(a_lab, b_lab)
    assert not np.array_equal(a_img, c_img)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"n": 0, "size": 32}, "n must"),
        ({"n": -3, "size": 32}, "n must"),
        ({"n": 4, "size": 4}, "size"),
        ({"n": 4, "size": 32, "num_classes": 9}, "num_classes"),
        ({"n": 4, "size": 32, "num_classes": 1}, "num_classes"),
    ],
)
def test_make_images_bad_inputs(kwargs, word):
    with pytest.raises(ValueError, match=word):
        data.make_images(**kwargs)


def test_normalize_shape_dtype_and_values():
    images = np.zeros((2, 10, 12, 3), dtype=np.uint8)
    images[..., 0] = 255
    x = data.normalize(images)
    assert x.shape == (2, 3, 10, 12) and x.dtype == np.float32 and x.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(x[0, 0, 0, 0], (1 - 0.485) / 0.229, rtol=1e-6)
    np.testing.assert_allclose(x[0, 1, 0, 0], -0.456 / 0.224, rtol=1e-6)
    with pytest.raises(ValueError, match="expected"):
        data.normalize(np.zeros((10, 12, 3), dtype=np.uint8))


def test_make_splits_differ_and_are_normalised():
    train, val = data.make_splits(8, 4, 16, seed=0)
    assert len(train) == 8 and len(val) == 4
    assert train.x.shape == (8, 3, 16, 16) and train.x.dtype == np.float32
    assert train.images.shape == (8, 16, 16, 3)
    assert not np.array_equal(train.images[:4], val.images)


def test_jpeg_round_trip_and_preprocess():
    images, _ = data.make_images(3, 32, seed=1)
    blobs = data.encode_jpeg(images, quality=95)
    assert len(blobs) == 3 and all(b[:2] == b"\xff\xd8" for b in blobs)  # JPEG magic
    decoded = data.decode_image(blobs[0])
    assert decoded.shape == (32, 32, 3) and decoded.dtype == np.uint8
    # JPEG drops the pixel noise, but the picture survives: per-channel means stay close
    diff = decoded.reshape(-1, 3).mean(0) - images[0].reshape(-1, 3).mean(0)
    assert np.abs(diff).max() < 8
    smooth = np.broadcast_to(
        np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (1, 32, 32, 3)
    ).copy()
    back = data.decode_image(data.encode_jpeg(smooth, quality=95)[0])
    assert (
        np.abs(back.astype(int) - smooth[0].astype(int)).max() < 12
    )  # a smooth image round-trips closely
    x = data.preprocess(blobs[1], 48)
    assert x.shape == (3, 48, 48) and x.dtype == np.float32
    assert data.resize(images[0], 16).shape == (16, 16, 3)
    with pytest.raises(ValueError, match="uint8"):
        data.encode_jpeg(images.astype(np.float32))


def test_decode_image_garbage_bytes():
    with pytest.raises(ValueError, match="cannot decode image"):
        data.decode_image(b"definitely not an image")
    with pytest.raises(ValueError, match="0 bytes"):
        data.decode_image(b"")


def test_normalize_refuses_float_input_instead_of_normalising_twice():
    images, _ = data.make_images(2, 16, seed=0)
    once = data.normalize(images)
    with pytest.raises(TypeError, match="uint8"):
        data.normalize(once.transpose(0, 2, 3, 1).copy())
    with pytest.raises(TypeError, match="already converted"):
        data.normalize(images.astype(np.float32) / 255.0)
