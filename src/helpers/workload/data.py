"""A deterministic generated image dataset: no downloads, big enough for a real loss curve.

Eight classes of coloured shapes and textures (``CLASS_NAMES``) on noisy backgrounds, with random
position, size, colours and noise: a small network needs a few hundred steps to learn them. The
same seed always gives the same images.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helpers.core.checks import check_int

__all__ = [
    "CLASS_NAMES",
    "make_images",
    "normalize",
    "make_splits",
    "encode_jpeg",
    "decode_image",
    "resize",
    "preprocess",
    "make_jpeg_dataset",
    "load_batch",
    "make_batches",
    "check_dataset",
    "batch_order",
]

CLASS_NAMES = ("circle", "square", "triangle", "cross", "ring", "h-stripes", "v-stripes", "checker")
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _mask(cls: int, size: int, rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    cx, cy = rng.uniform(0.3, 0.7, 2)
    r = rng.uniform(0.14, 0.28)
    dx, dy = xx - cx, yy - cy
    if cls == 0:
        return dx**2 + dy**2 < r**2
    if cls == 1:
        return np.maximum(np.abs(dx), np.abs(dy)) < r * 0.85
    if cls == 2:
        return (dy < r) & (np.abs(dx) < (dy + r) / 2)
    if cls == 3:
        w = r / 3
        return ((np.abs(dx) < w) & (np.abs(dy) < r)) | ((np.abs(dy) < w) & (np.abs(dx) < r))
    if cls == 4:
        d = np.sqrt(dx**2 + dy**2)
        return (d < r) & (d > r * 0.55)
    freq = rng.uniform(3, 6)
    phase = rng.uniform(0, 2 * np.pi)
    if cls == 5:
        return np.sin(2 * np.pi * freq * yy + phase) > 0
    if cls == 6:
        return np.sin(2 * np.pi * freq * xx + phase) > 0
    return (np.floor(xx * freq + phase) + np.floor(yy * freq + phase)) % 2 == 0


def make_images(
    n: int, size: int, *, seed: int = 0, num_classes: int = 8, noise: float = 0.25
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` generated RGB images ``(n, size, size, 3)`` uint8 and their labels ``(n,)`` int64.

    Labels cycle through the classes in a shuffled order, so every class is present.
    """
    check_int("n", n)
    check_int("size", size, minimum=8)
    check_int("num_classes", num_classes, minimum=2, maximum=len(CLASS_NAMES))
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    for i, cls in enumerate(labels):
        bg, fg = rng.uniform(0, 1, 3), rng.uniform(0, 1, 3)
        while np.abs(bg - fg).sum() < 0.6:  # keep the shape visible
            fg = rng.uniform(0, 1, 3)
        m = _mask(int(cls), size, rng)[..., None]
        img = np.where(m, fg, bg) + rng.normal(0, noise, (size, size, 3))
        images[i] = (np.clip(img, 0, 1) * 255).astype(np.uint8)
    return images, labels


def normalize(images: np.ndarray) -> np.ndarray:
    """uint8 ``(n, h, w, 3)`` images -> float32 ``(n, 3, h, w)`` normalised with ImageNet statistics."""
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"expected (n, h, w, 3) images, got shape {images.shape}")
    if images.dtype != np.uint8:  # dividing converted images by 255 again: near-constant inputs
        raise TypeError(
            f"normalize takes uint8 images (0-255), got {images.dtype}: "
            "it looks already converted; pass the raw images"
        )
    x = (images.astype(np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


@dataclass
class Split:
    """Normalised network inputs, labels and the raw uint8 images of one split."""

    x: np.ndarray
    y: np.ndarray
    images: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def make_splits(
    train: int, val: int, size: int, *, seed: int = 0, num_classes: int = 8
) -> tuple[Split, Split]:
    """A training split and a held-out split (different seeds, same distribution)."""
    tr_img, tr_y = make_images(train, size, seed=seed, num_classes=num_classes)
    va_img, va_y = make_images(val, size, seed=seed + 10_000, num_classes=num_classes)
    return Split(normalize(tr_img), tr_y, tr_img), Split(normalize(va_img), va_y, va_img)


def encode_jpeg(images: np.ndarray, quality: int = 90) -> list[bytes]:
    """Encode uint8 ``(n, h, w, 3)`` images as JPEG bytes (the 'files on disk' of a real service)."""
    from PIL import Image

    if images.ndim != 4 or images.dtype != np.uint8:
        raise ValueError(f"expected uint8 (n, h, w, 3) images, got {images.dtype} {images.shape}")
    bufs = [io.BytesIO() for _ in images]
    for img, buf in zip(images, bufs):
        Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return [buf.getvalue() for buf in bufs]


def decode_image(data: bytes) -> np.ndarray:
    """Decode JPEG/PNG bytes to a uint8 ``(h, w, 3)`` array, with a clear error for bad bytes."""
    from PIL import Image, UnidentifiedImageError

    try:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"cannot decode image ({len(data)} bytes): {exc}") from exc


def resize(image: np.ndarray, size: int) -> np.ndarray:
    """Resize a uint8 ``(h, w, 3)`` image to ``(size, size, 3)`` with bilinear filtering."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.BILINEAR))


def preprocess(data: bytes, size: int) -> np.ndarray:
    """Decode, resize and normalise one encoded image into a float32 ``(3, size, size)`` network input."""
    return normalize(resize(decode_image(data), size)[None])[0]


def make_jpeg_dataset(n: int, size: int, *, seed: int = 0, quality: int = 90) -> list[bytes]:
    """``n`` generated images of ``size`` x ``size`` pixels, JPEG-encoded (the service's input files)."""
    images, _ = make_images(n, size, seed=seed)
    return encode_jpeg(images, quality=quality)


def load_batch(jpegs: Sequence[bytes], indices: Sequence[int], image_size: int) -> np.ndarray:
    """The CPU stage: decode, resize and normalise ``jpegs[indices]`` into a float32 NCHW batch."""
    if len(indices) == 0:
        raise ValueError("a batch needs at least one image index")
    return normalize(np.stack([resize(decode_image(jpegs[i]), image_size) for i in indices]))


def make_batches(n: int, batch_size: int) -> list[list[int]]:
    """Index lists of consecutive batches (the last one may be smaller)."""
    check_int("batch_size", batch_size)
    return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]


def check_dataset(jpegs: Sequence[bytes], batch_size: int, image_size: int) -> list[list[int]]:
    """Check a pipeline's dataset and sizes; return the index lists of its batches."""
    if jpegs is None or len(jpegs) == 0:
        raise ValueError("the dataset is empty: the pipeline needs at least one encoded image")
    check_int("image_size", image_size, minimum=8)
    if not all(isinstance(b, (bytes, bytearray)) for b in jpegs):
        raise TypeError(
            "the dataset must be a sequence of encoded image bytes (see make_jpeg_dataset)"
        )
    return make_batches(len(jpegs), batch_size)


def batch_order(n: int, steps: int, batch_size: int, seed: int = 0) -> np.ndarray:
    """``(steps, batch_size)`` sample indices: a fresh shuffle every epoch, the same for every framework."""
    if not (1 <= batch_size <= n) or steps < 1:
        raise ValueError(
            f"need 1 <= batch_size <= n samples and steps >= 1; got n={n}, batch_size={batch_size}, steps={steps}"
        )
    rng, per_epoch = np.random.default_rng(seed), n // batch_size
    epochs = [rng.permutation(n)[: per_epoch * batch_size] for _ in range(-(-steps // per_epoch))]
    return np.concatenate(epochs).reshape(-1, batch_size)[:steps]
