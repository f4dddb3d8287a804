"""helpers.core.comparison on OneFlow tensors (the oneflow test group; the rest of the module's
tests are in tests/core/test_comparison.py, which runs without OneFlow)."""

from __future__ import annotations

import numpy as np

from helpers.core.comparison import to_numpy


def test_to_numpy_accepts_oneflow_tensors(flow):
    ref = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = to_numpy(flow.tensor(ref))
    assert out.dtype == np.float64 and out.shape == (2, 3)
    np.testing.assert_array_equal(out, ref)
