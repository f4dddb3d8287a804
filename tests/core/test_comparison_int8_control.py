"""The INT8 checks have a control: a "quantized" model that ignores its input must fail them.

The old check (row-wise cosine > 0.98 between INT8 and fp32 outputs) passed for such a model when a
shared bias dominated the logits; the check chapter 8 and test_quantization use now
(each input's output nearest to its own fp32 output, after removing the shared mean) does not.
"""

import numpy as np

from helpers.core.comparison import nearest_neighbour_agreement, rowwise_cosine


def _outputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    bias = np.array(
        [20.0, -15.0, 10.0, 5.0]
    )  # a shared bias dominates 4 logits, as in a small head
    fp32 = bias + rng.normal(0, 1.0, (16, 4))  # the part that depends on the input
    faithful = fp32 + rng.normal(0, 0.05, fp32.shape)  # 8-bit rounding noise
    ignoring = bias + rng.normal(0, 0.05, fp32.shape)  # the same answer whatever the input
    return fp32, faithful, ignoring


def _check(int8: np.ndarray, fp32: np.ndarray) -> bool:
    return nearest_neighbour_agreement(int8 - int8.mean(0), fp32 - fp32.mean(0)) == 1.0


def test_faithful_int8_passes_and_input_ignoring_model_fails():
    fp32, faithful, ignoring = _outputs()
    assert _check(faithful, fp32)
    assert not _check(ignoring, fp32)


def test_the_old_cosine_check_could_not_tell_them_apart():
    fp32, faithful, ignoring = _outputs()
    assert rowwise_cosine(faithful, fp32).min() > 0.98
    assert rowwise_cosine(ignoring, fp32).min() > 0.98  # the weakness the control exposes
