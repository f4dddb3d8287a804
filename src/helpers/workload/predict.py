"""Batch-wise prediction and top-1 accuracy for every kind of model the course runs.

``model``: a PyTorch or OneFlow module (TorchScript, ``torch.compile``, ``nn.Graph`` too), a
``Runner`` or any function of a NumPy batch. A module runs in eval mode without gradients on its
parameters' device (float64 inputs to a float64 model: an "exact" reference), its mode restored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers.core.checks import check_int
from helpers.workload.models import framework_of, nn_namespace

__all__ = ["model_device", "predict_batched", "predict_classes", "accuracy"]


def _first_parameter(model: Any) -> Any:
    """The first parameter of ``model`` or, in a OneFlow ``nn.Graph``, of its (proxied) modules."""
    blocks = getattr(model, "_blocks", None)
    inners = [model]
    if isinstance(blocks, dict):
        inners = [getattr(b, "_oneflow_internal_origin__", b) for b in blocks.values()]
    for inner in inners:
        params = getattr(inner, "parameters", None)
        if callable(params):
            try:
                return next(iter(params()))
            except (StopIteration, TypeError, AttributeError):
                continue
    return None


def model_device(model: Any, framework: str | None = None) -> Any:
    """The device of a model's first parameter (also in an ``nn.Graph``), else the course's
    default for its framework (:func:`helpers.core.environment.paired_devices`)."""
    param = _first_parameter(model)
    if param is not None:
        return param.device
    from helpers.core.environment import paired_devices

    return paired_devices()[0 if (framework or framework_of(model)) == "torch" else 1]


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
    """Outputs of ``model`` on all of ``x``, ``batch_size`` samples at a time.

    ``None``: one call (a OneFlow ``nn.Graph`` needs the batch size it was compiled for).
    """
    arr = _as_batch(x)
    bs = check_int("batch_size", len(arr) if batch_size is None else batch_size)
    starts = range(0, len(arr), bs)
    try:
        fw: str | None = framework_of(model)
    except TypeError:  # not a torch or OneFlow object: a function of NumPy batches?
        fw = None
    if fw is None:
        if not callable(model):
            raise TypeError(
                f"cannot predict with a {type(model).__name__}: it is neither a model nor a callable "
                "(give a PyTorch or OneFlow model, a helpers.deploy.runner.Runner or a function)"
            )
        return np.concatenate([_to_array(model(arr[i : i + bs])) for i in starts])
    mod, nn, _ = nn_namespace(fw)
    device = model_device(model, fw)
    param = _first_parameter(model)
    wide = param is not None and str(param.dtype).endswith("float64")
    arr = np.ascontiguousarray(arr, dtype=np.float64 if wide else np.float32)
    to_tensor = mod.from_numpy if fw == "torch" else mod.tensor
    # a module predicts in eval mode (an nn.Graph was compiled in the mode its module had)
    module = isinstance(model, nn.Module)
    was_training = bool(getattr(model, "training", False))
    if module:
        model.eval()
    try:
        with mod.no_grad():
            return np.concatenate(
                [_to_array(model(to_tensor(arr[i : i + bs]).to(device))) for i in starts]
            )
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
