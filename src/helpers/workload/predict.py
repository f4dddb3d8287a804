"""Batch-wise prediction and top-1 accuracy for every kind of model the course runs.

    logits = predict_batched(model, x, batch_size=64)   # NumPy in, NumPy out
    acc = accuracy(runner, val.x, val.y)                # top-1 on a held-out split

``model`` may be a PyTorch or OneFlow module (also TorchScript, ``torch.compile`` and OneFlow
``nn.Graph`` objects), a :class:`helpers.deploy.runner.Runner` (ONNX Runtime, OpenVINO), or
any function from a NumPy batch to an array or tensor. A module runs in eval mode without
gradients, on the device of its parameters, and gets float64 inputs when its parameters are
float64 (a float64 copy makes a good "exact" reference); its training mode is restored after.
Frameworks are imported only when a model of theirs is passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["model_device", "predict_batched", "predict_classes", "accuracy"]


def _framework(model: Any) -> str | None:
    """'torch' or 'oneflow' for a module, tensor or nn.Graph of either framework; None otherwise."""
    for cls in type(model).__mro__:
        root = cls.__module__.split(".")[0]
        if root in ("torch", "oneflow"):
            return root
    return None


def _inner_modules(model: Any) -> list[Any]:
    """The model itself, or for a OneFlow ``nn.Graph`` the modules it holds (wrapped in proxies)."""
    blocks = getattr(model, "_blocks", None)
    if isinstance(blocks, dict):
        return [getattr(b, "_oneflow_internal_origin__", b) for b in blocks.values()]
    return [model]


def _first_parameter(model: Any) -> Any:
    for inner in _inner_modules(model):
        params = getattr(inner, "parameters", None)
        if callable(params):
            try:
                return next(iter(params()))
            except (StopIteration, TypeError, AttributeError):
                continue
    return None


def model_device(model: Any, framework: str | None = None) -> Any:
    """The device of a torch/OneFlow model's first parameter (also inside an ``nn.Graph``).

    A model without parameters gets the framework's default device of the course
    (:func:`helpers.core.environment.paired_devices`).
    """
    param = _first_parameter(model)
    if param is not None:
        return param.device
    framework = framework or _framework(model)
    if framework not in ("torch", "oneflow"):
        raise TypeError(f"{type(model).__name__} is neither a torch nor a OneFlow model")
    from helpers.core.environment import paired_devices

    return paired_devices()[0 if framework == "torch" else 1]


def _to_array(out: Any) -> np.ndarray:
    """A model output as a NumPy array (half precision widened to float32)."""
    if isinstance(out, (tuple, list, dict)):
        raise TypeError(
            f"the model returned a {type(out).__name__}: prediction needs a single output tensor "
            "or array (wrap the model to pick the output you want)"
        )
    if hasattr(out, "detach") and hasattr(out, "cpu"):
        out = out.detach().cpu()
        if str(out.dtype).endswith(("bfloat16", "float16")):
            out = out.float()
        out = out.numpy()
    out = np.asarray(out)
    if out.dtype == object or out.ndim == 0:
        raise TypeError("the model must return a single output tensor or array with a batch axis")
    return out


def _framework_module(framework: str) -> Any:
    if framework == "torch":
        import torch

        return torch
    from helpers.core.environment import import_oneflow

    return import_oneflow()


def _predict_fn(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A function NumPy batch -> NumPy output for ``model`` (no gradients; the mode is left alone)."""
    fw = _framework(model)
    if fw is None:
        if not callable(model):
            raise TypeError(
                f"cannot predict with a {type(model).__name__}: it is neither a model nor a callable "
                "(give a PyTorch or OneFlow model, a helpers.deploy.runner.Runner or a function)"
            )
        return lambda x: _to_array(model(x))
    mod = _framework_module(fw)
    device = model_device(model, fw)
    param = _first_parameter(model)
    dtype = np.float64 if param is not None and str(param.dtype).endswith("float64") else np.float32

    def run(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=dtype)
        t = mod.from_numpy(x) if fw == "torch" else mod.tensor(x)
        with mod.no_grad():
            out = model(t.to(device))
        return _to_array(out)

    return run


def _as_batch(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim < 1 or len(arr) == 0:
        raise ValueError(
            f"inputs must be a non-empty batch (first axis = samples), got {arr.shape}"
        )
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"inputs must be numbers, got dtype {arr.dtype}")
    return arr


def predict_batched(model: Any, x: Any, batch_size: int | None = None) -> np.ndarray:
    """Outputs of ``model`` on all of ``x`` (first axis = samples), ``batch_size`` samples at a time.

    ``batch_size=None`` runs everything in one call (a OneFlow ``nn.Graph`` needs the batch size it
    was compiled for). Inputs are fed as float32 (float64 to a float64 model).
    """
    arr = _as_batch(x)
    bs = len(arr) if batch_size is None else batch_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    run = _predict_fn(model)
    fw = _framework(model)
    # a module predicts in eval mode (an nn.Graph was compiled in the mode its module had)
    module = fw is not None and isinstance(model, _framework_module(fw).nn.Module)
    was_training = bool(getattr(model, "training", False))
    if module:
        model.eval()
    try:
        return np.concatenate([run(arr[i : i + bs]) for i in range(0, len(arr), bs)])
    finally:
        if module:
            model.train(was_training)


def predict_classes(model: Any, x: Any, batch_size: int | None = 64) -> np.ndarray:
    """Top-1 class of every sample: the argmax of ``model``'s (samples, classes) outputs."""
    logits = predict_batched(model, x, batch_size)
    if logits.ndim != 2:
        raise ValueError(f"expected (samples, classes) logits, got shape {logits.shape}")
    return logits.argmax(axis=1)


def accuracy(model: Any, x: Any, y: Any, batch_size: int | None = 64) -> float:
    """Top-1 accuracy of a classifier on ``(x, y)`` (``y``: one class index per sample)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class indices, got shape {y.shape}")
    if len(y) != len(x):
        raise ValueError(f"{len(x)} inputs but {len(y)} labels")
    return float(np.mean(predict_classes(model, x, batch_size) == y))
