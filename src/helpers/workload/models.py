"""The course's models, built identically in PyTorch (torchvision) and OneFlow (flowvision).

ResNet classifiers (case study 1) or any other classifier, the reader's own too
(:func:`build_classifier`; ``COURSE_MODEL`` sets every chapter's ``S.arch``), a MobileNetV2
embedder (case study 2), and weight transfer through NumPy that names any missing, unexpected or
mis-shaped parameter. All weights are random or trained here: nothing is downloaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from helpers.core.checks import check_int
from helpers.core.environment import import_oneflow

__all__ = [
    "FRAMEWORKS",
    "RESNETS",
    "framework_of",
    "nn_namespace",
    "resolve_builder",
    "build_classifier",
    "oneflow_counterpart",
    "build_embedder",
    "state_dict_numpy",
    "load_numpy_state",
    "transfer_weights",
    "twin",
    "calibrate_batchnorm",
    "batchnorm_momentum",
]

FRAMEWORKS = ("torch", "oneflow")
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use 'torch' or 'oneflow'")


def framework_of(module: Any) -> str:
    """'torch' or 'oneflow' for a module, tensor or ``nn.Graph`` of either framework."""
    for cls in type(module).__mro__:
        root = cls.__module__.split(".")[0]
        if root in FRAMEWORKS:
            return root
    mod = type(module).__module__.split(".")[0]
    raise TypeError(f"{type(module).__name__} (from {mod}) is neither a torch nor a OneFlow object")


def nn_namespace(framework: str) -> tuple[Any, Any, Any]:
    """``(framework module, nn, functional)`` for 'torch' or 'oneflow'."""
    _check_framework(framework)
    if framework == "torch":
        import torch

        return torch, torch.nn, torch.nn.functional
    flow = import_oneflow()
    return flow, flow.nn, flow.nn.functional


def resolve_builder(arch: str) -> Callable[..., Any]:
    """The PyTorch builder of ``arch``: a torchvision classification model's name, or
    ``"package.module:function"`` (your own; called with ``num_classes=``)."""
    if not isinstance(arch, str) or not arch.strip():
        raise ValueError(f"arch must be a model name or 'module:function', got {arch!r}")
    if ":" in arch:
        module_name, _, attr = arch.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"cannot import {module_name!r} for {arch!r}: {exc}") from exc
        fn = getattr(module, attr, None)
        if not callable(fn):
            raise ValueError(f"{module_name} has no function {attr!r} (from {arch!r})")
        return fn
    import torchvision

    names = sorted(torchvision.models.list_models(module=torchvision.models))
    if arch not in names:
        raise ValueError(
            f"unknown model {arch!r}: give a torchvision classifier ({', '.join(names[:8])}, ... "
            "torchvision.models.list_models(module=torchvision.models) lists all) or "
            "'package.module:function' for your own"
        )
    return lambda **kw: torchvision.models.get_model(arch, weights=None, **kw)


def oneflow_counterpart(arch: str) -> str | None:
    """None when flowvision has ``arch`` under the same name, else the reason OneFlow sits out.

    A namesake can still differ from torchvision's (flowvision 0.2.1's RegNets have an unpadded
    stem convolution): only comparing the twins' outputs tells (chapter 2's check).
    """
    if ":" in arch:
        return f"{arch} is your own builder: it has no flowvision counterpart"
    import_oneflow()
    import flowvision

    if not callable(getattr(flowvision.models, arch, None)):
        return f"flowvision 0.2.1 has no {arch}"
    return None


def build_classifier(
    framework: str,
    arch: str,
    num_classes: int = 1000,
    zero_init_residual: bool | None = False,
) -> Any:
    """A randomly initialised classifier ``arch`` (:func:`resolve_builder`) in PyTorch or OneFlow.

    ``zero_init_residual`` (ResNets and kin): each residual block starts as its shortcut (Goyal
    et al., 2017), so a network trained from scratch learns in few steps; ``None``: where offered.
    """
    _check_framework(framework)
    check_int("num_classes", num_classes)
    takes = ":" not in arch and arch.startswith(("resnet", "resnext", "wide_resnet"))
    if zero_init_residual and not takes:
        raise ValueError(f"{arch} has no zero_init_residual option (ResNets have it)")
    kw: dict[str, Any] = {"num_classes": num_classes}
    if takes:
        kw["zero_init_residual"] = bool(zero_init_residual is None or zero_init_residual)
    return _build(framework, arch, **kw)


def _build(framework: str, arch: str, **kw: Any) -> Any:
    """``arch`` from torchvision (:func:`resolve_builder`) or flowvision, random weights."""
    if framework == "torch":
        return resolve_builder(arch)(**kw)
    reason = oneflow_counterpart(arch)
    if reason is not None:
        raise ValueError(f"no OneFlow model for {arch}: {reason}")
    import warnings

    import flowvision

    with warnings.catch_warnings():  # in-place activations OneFlow runs out of place
        warnings.filterwarnings("ignore", message=".*do not support inplace.*")
        return getattr(flowvision.models, arch)(pretrained=False, **kw)


def build_embedder(framework: str, dim: int = 128, width_mult: float = 1.0) -> Any:
    """A MobileNetV2 backbone + linear projection + L2 normalisation (the case-study-2 embedder)."""
    flow_or_torch, nn, F = nn_namespace(framework)
    check_int("dim", dim)
    backbone = _build(framework, "mobilenet_v2", width_mult=width_mult)

    class MobileNetV2Embedder(nn.Module):
        """Image -> L2-normalised embedding of size ``dim``."""

        def __init__(self) -> None:
            super().__init__()
            self.features = backbone.features
            self.head = nn.Linear(backbone.last_channel, dim)

        def forward(self, x: Any) -> Any:
            x = self.features(x)
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return F.normalize(self.head(x), dim=1)

    return MobileNetV2Embedder()


def state_dict_numpy(module: Any) -> dict[str, np.ndarray]:
    """A module's state dict as NumPy arrays (works for torch and OneFlow)."""
    framework_of(module)
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def _is_counter(key: str) -> bool:
    return key.endswith("num_batches_tracked")


def load_numpy_state(module: Any, state: dict[str, np.ndarray]) -> None:
    """Load NumPy arrays into a torch or OneFlow module, checking keys and shapes first.

    BatchNorm ``num_batches_tracked`` counters (training bookkeeping, 0-d tensors OneFlow
    reshapes) keep the model's own. ``KeyError``: missing/unexpected keys; ``ValueError``: shapes.
    """
    fw, _, _ = nn_namespace(framework_of(module))
    target = module.state_dict()
    missing = sorted(k for k in target if k not in state and not _is_counter(k))
    unexpected = sorted(k for k in state if k not in target and not _is_counter(k))
    if missing or unexpected:
        shown = [
            ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "") or "none"
            for keys in (missing, unexpected)
        ]
        raise KeyError(f"weights do not match the model: missing {shown[0]}; unexpected {shown[1]}")
    shapes = [
        (k, state[k].shape, tuple(target[k].shape))
        for k in target
        if k in state and not _is_counter(k) and tuple(state[k].shape) != tuple(target[k].shape)
    ]
    if shapes:
        k, got, want = shapes[0]
        raise ValueError(
            f"{len(shapes)} parameter(s) have the wrong shape, e.g. {k}: weights {got} vs model {want}"
        )
    module.load_state_dict(
        {
            k: v if _is_counter(k) else fw.tensor(np.ascontiguousarray(state[k]))
            for k, v in target.items()
        }
    )


def transfer_weights(src: Any, dst: Any) -> Any:
    """Copy every weight of ``src`` into ``dst`` (torch -> OneFlow, OneFlow -> torch, or same framework)."""
    load_numpy_state(dst, state_dict_numpy(src))
    return dst


def twin(module: Any, framework: str, builder: Any, *args: Any, **kwargs: Any) -> Any:
    """Build ``builder(framework, *args, **kwargs)`` and give it ``module``'s weights and train/eval mode."""
    other = builder(framework, *args, **kwargs)
    transfer_weights(module, other)
    other.train(module.training)
    return other


def _norms(module: Any) -> list[Any]:
    return [m for m in module.modules() if hasattr(m, "running_mean") and hasattr(m, "momentum")]


def batchnorm_momentum(module: Any) -> float | None:
    """The smallest BatchNorm momentum of ``module`` (None: no BatchNorm, or a cumulative one).

    torchvision's MobileNetV3 and EfficientNets use 0.01: their running statistics follow the
    weights ten times slower than PyTorch's default 0.1, so after a short training they still
    describe the weights of long ago (eval mode then gives near-chance answers).
    """
    values = [m.momentum for m in _norms(module) if m.momentum is not None]
    return min(values) if values else None


def calibrate_batchnorm(module: Any, x: Any, batch_size: int | None = None) -> Any:
    """Set every BatchNorm's running statistics to the exact average over inputs ``x`` in
    batches of ``batch_size`` (None: one batch); return ``module`` in eval mode.

    A random network in eval mode normalises with mean 0 / variance 1, so activations drift
    until every image gets almost the same output; after training the statistics average
    batches seen while the weights still changed. Weights stay untouched; BatchNorm alone
    runs in train mode, with momentum 1/k at the k-th batch (OneFlow has no cumulative mode).
    """
    fw, _, _ = nn_namespace(framework_of(module))
    norms = _norms(module)
    if not norms:
        raise ValueError(f"{type(module).__name__} has no BatchNorm layers to calibrate")
    size = len(x) if batch_size is None else batch_size
    if len(x) < 2 or size < 2:
        raise ValueError(
            "calibrate_batchnorm needs at least 2 inputs and batches of at least 2 "
            "(batch statistics of one sample are degenerate)"
        )
    device = getattr(next(iter(module.parameters()), None), "device", "cpu")
    saved = [m.momentum for m in norms]
    try:
        module.eval()
        for m in norms:
            m.train()  # dropout and the like stay off
        with fw.no_grad():
            for k, i in enumerate(range(0, len(x) - 1, size), start=1):
                xb = x[i : i + size]
                if len(xb) < 2:
                    break
                for m in norms:
                    m.momentum = 1.0 / k  # a cumulative average over the batches
                t = xb if hasattr(xb, "device") else fw.from_numpy(np.ascontiguousarray(xb))
                module(t.to(device))
    finally:
        for m, momentum in zip(norms, saved):
            m.momentum = momentum
        module.eval()
    return module
