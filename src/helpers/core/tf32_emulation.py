"""TF32 on a CPU: float32 rounded to a 10-bit mantissa, to prove tolerances without a GPU.

:func:`round_mantissa` rounds float32 values (NumPy or torch) to fewer stored mantissa bits;
:func:`emulate_tf32` runs a module's convolutions and linear layers on rounded inputs and
weights, which is what TF32 tensor cores compute (chapter 6, ``tools/measure_precision.py`` and
the accumulation factors of :mod:`helpers.core.precision`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["emulate_tf32"]

MANTISSA_BITS: dict[str, int] = {"fp32": 23, "tf32": 10, "bf16": 7, "fp16": 10}


# --------------------------------------------------------------------------------- TF32 on a CPU
_ROUNDINGS = ("nearest", "truncate")


def _check_rounding(bits: int, rounding: str) -> int:
    if rounding not in _ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(_ROUNDINGS)}, got {rounding!r}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 23:
        raise ValueError(f"bits must be an int in 1..23 (float32 stores 23), got {bits!r}")
    return 23 - bits  # low bits dropped


def round_mantissa(x: Any, bits: int = 10, rounding: str = "nearest") -> Any:
    """Round float32 values to ``bits`` stored mantissa bits, kept in float32 (10: TF32, 7: bf16).

    Works on the float32 bit pattern: ``rounding='nearest'`` is round-to-nearest-even (add
    ``0x0FFF`` plus the lowest kept bit, then clear the 13 low bits, for TF32); ``'truncate'``
    clears them (round toward zero, what a tensor core does with a float32 register it was not
    given rounded). Exponent range is float32's; inf and NaN pass unchanged; a value rounded past
    the largest finite number becomes inf, as in hardware. Accepts a NumPy array or a torch
    tensor (any device) of dtype float32 and returns the same kind.
    """
    drop = _check_rounding(bits, rounding)
    keep_mask = 0xFFFFFFFF ^ ((1 << drop) - 1)
    half_minus_one = (1 << (drop - 1)) - 1
    # Integer arithmetic on the bit pattern wraps modulo 2^32 (two's complement in int32), so the
    # sign bit rides along and inf stays inf; only NaN (whose payload could carry into the sign)
    # is passed through explicitly.
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if x.dtype != torch.float32:
            raise TypeError(f"round_mantissa needs float32, got {x.dtype}")
        b = x.detach().view(torch.int32)
        if rounding == "nearest":
            r = (b >> drop) & 1  # the lowest kept bit: ties go to even
            r += b
            r += half_minus_one
        else:
            r = b.clone()
        r &= keep_mask - (1 << 32)  # the mask as a signed int32
        return torch.where(torch.isnan(x), x.detach(), r.view(torch.float32))
    import numpy as np

    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise TypeError(f"round_mantissa needs float32, got {arr.dtype}")
    b = arr.view(np.uint32)
    if rounding == "nearest":
        r = b + np.uint32(half_minus_one) + ((b >> np.uint32(drop)) & np.uint32(1))
    else:
        r = b.copy()
    r &= np.uint32(keep_mask)
    return np.where(np.isnan(arr), arr, r.view(np.float32)).astype(np.float32, copy=False)


_STRAIGHT_THROUGH: Any = None


def _straight_through() -> Any:
    """An autograd function: rounds in the forward pass, passes gradients through unchanged."""
    global _STRAIGHT_THROUGH
    if _STRAIGHT_THROUGH is None:
        import torch

        class RoundMantissa(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, bits: int, rounding: str) -> Any:  # noqa: ARG004
                return round_mantissa(x, bits, rounding)

            @staticmethod
            def backward(ctx: Any, grad: Any) -> tuple[Any, None, None]:  # noqa: ARG004
                return grad, None, None

        _STRAIGHT_THROUGH = RoundMantissa
    return _STRAIGHT_THROUGH


def _round_tensor(t: Any, bits: int, rounding: str) -> Any:
    """Round a float32 tensor (keeping its autograd path); anything else passes unchanged."""
    import torch

    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        return t
    if t.requires_grad and torch.is_grad_enabled():
        return _straight_through().apply(t, bits, rounding)
    return round_mantissa(t, bits, rounding)


@contextmanager
def emulate_tf32(
    module: Any,
    *,
    rounding: str = "nearest",
    conv: bool = True,
    linear: bool = True,
    grads: bool = False,
    bits: int = MANTISSA_BITS["tf32"],
) -> Iterator[Any]:
    """Run ``module``'s convolutions and linear layers as TF32 tensor cores would, on any device.

    Inside the block every ``Conv1d/2d/3d``, ``ConvTranspose*`` (``conv``) and ``Linear``
    (``linear``) sees its float32 input and weight rounded to a 10-bit mantissa
    (:func:`round_mantissa`) and accumulates in float32, which is what TF32 does. Weights are
    rounded in place and restored bit for bit on exit; the forward pre-hooks are removed.
    ``conv=True, linear=False`` is PyTorch's default on an Ampere GPU (cuDNN TF32 on, matmul off).

    ``grads=True`` also rounds each layer's incoming gradient (a full backward pre-hook), so the
    backward convolutions of an input gradient (saliency) see TF32 inputs too; it needs layers
    whose outputs are not modified in place. Without it gradients flow through the rounding
    unchanged and the backward pass is float32. Matmuls written as ``torch.matmul`` / ``@`` in a
    ``forward`` are not covered. Yields ``module``.
    """
    import torch

    _check_rounding(bits, rounding)
    kinds: tuple[type, ...] = ()
    if conv:
        kinds += (torch.nn.modules.conv._ConvNd,)
    if linear:
        kinds += (torch.nn.Linear,)
    layers = [m for m in module.modules() if kinds and isinstance(m, kinds)]

    def round_inputs(_mod: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(_round_tensor(a, bits, rounding) for a in args)

    def round_grads(_mod: Any, grad_output: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(g if g is None else _round_tensor(g, bits, rounding) for g in grad_output)

    saved: dict[int, tuple[Any, Any]] = {}
    handles = []
    try:
        with torch.no_grad():
            for layer in layers:
                w = getattr(layer, "weight", None)
                if isinstance(w, torch.Tensor) and w.dtype == torch.float32 and id(w) not in saved:
                    saved[id(w)] = (w, w.detach().clone())
                    w.copy_(round_mantissa(w.detach(), bits, rounding))
        for layer in layers:
            handles.append(layer.register_forward_pre_hook(round_inputs))
            if grads:
                handles.append(layer.register_full_backward_pre_hook(round_grads))
        yield module
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for w, original in saved.values():
                w.copy_(original)
