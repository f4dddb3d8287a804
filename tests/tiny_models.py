"""The tests' one tiny model and its inputs, for test modules and fixtures (tests/conftest.py).

tests/ is on sys.path as the folder of tests/conftest.py: ``from tiny_models import ...``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def tiny_classifier(
    framework: str = "torch",
    *,
    width: int = 8,
    classes: int = 4,
    dropout: float = 0.0,
    seed: int | None = None,
) -> Any:
    """A tiny CNN with the layer patterns of the course's models (convolution, BatchNorm, ReLU,
    pooling, linear), in train mode, built the same way in PyTorch and OneFlow; ``seed`` seeds
    the framework first."""
    from helpers.workload import models

    fw, nn, _ = models.nn_namespace(framework)
    if seed is not None:
        fw.manual_seed(seed)
    layers = [
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers, nn.Linear(width, classes))


def images(n: int = 2, size: int = 8, seed: int = 0) -> np.ndarray:
    """``n`` random float32 images (NCHW), the same for the same seed."""
    return np.random.default_rng(seed).normal(size=(n, 3, size, size)).astype(np.float32)
