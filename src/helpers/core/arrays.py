"""One conversion every comparison starts with: any framework's tensor to a float64 NumPy array."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["to_numpy"]


def to_numpy(x: Any) -> np.ndarray:
    """Convert a torch / OneFlow tensor, NumPy array, scalar or nested list to a float64 NumPy array."""
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "detach") and hasattr(x, "cpu"):  # torch and OneFlow tensors
        t = x.detach().cpu()
        if str(getattr(t, "dtype", "")).endswith(("bfloat16", "float16")):
            t = t.float()
        arr = t.numpy()
    elif isinstance(x, (list, tuple, int, float, np.generic)):
        arr = np.asarray(x)
    else:
        raise TypeError(f"cannot convert {type(x).__module__}.{type(x).__name__} to a NumPy array")
    if arr.dtype == object:
        raise TypeError("cannot compare ragged or object arrays")
    return arr.astype(np.float64, copy=False)
