"""The course's models, built identically in PyTorch (torchvision) and OneFlow (flowvision).

- ResNet-18/50/101 classifiers (case study 1; ResNet-101 in full mode, a smaller
  sibling in quick mode),
- a MobileNetV2 face-style embedder producing L2-normalised embeddings (case study 2),

plus weight transfer in both directions through NumPy, which names any
missing, unexpected or mis-shaped parameter instead of failing obscurely.
All weights are random or trained here: nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers.core.environment import import_oneflow

__all__ = [
    "FRAMEWORKS",
    "RESNETS",
    "framework_of",
    "nn_namespace",
    "build_resnet",
    "build_embedder",
    "state_dict_numpy",
    "load_numpy_state",
    "transfer_weights",
    "twin",
    "calibrate_batchnorm",
]

FRAMEWORKS = ("torch", "oneflow")
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101")


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use 'torch' or 'oneflow'")


def framework_of(module: Any) -> str:
    """'torch' or 'oneflow' for a module (or tensor) of either framework."""
    mod = type(module).__module__.split(".")[0]
    for cls in type(module).__mro__:
        root = cls.__module__.split(".")[0]
        if root in FRAMEWORKS:
            return root
    raise TypeError(f"{type(module).__name__} (from {mod}) is neither a torch nor a OneFlow object")


def nn_namespace(framework: str) -> tuple[Any, Any, Any]:
    """``(framework module, nn, functional)`` for 'torch' or 'oneflow'."""
    _check_framework(framework)
    if framework == "torch":
        import torch

        return torch, torch.nn, torch.nn.functional
    flow = import_oneflow()
    return flow, flow.nn, flow.nn.functional


def build_resnet(
    framework: str,
    arch: str = "resnet101",
    num_classes: int = 1000,
    zero_init_residual: bool = False,
) -> Any:
    """A randomly initialised ResNet from torchvision or flowvision (same structure, same keys).

    ``zero_init_residual``: the last BatchNorm of every residual branch starts at zero, so that
    each block starts as its shortcut (Goyal et al., 2017). A network to be trained from scratch
    in a few steps needs it: without it a ResNet-101 at 224 px, 30 steps of batch 32, ended
    near chance with its loss above where it started.
    """
    _check_framework(framework)
    if arch not in RESNETS:
        raise ValueError(f"unknown arch {arch!r}; use one of {', '.join(RESNETS)}")
    if num_classes < 1:
        raise ValueError("num_classes must be >= 1")
    if framework == "torch":
        import torchvision

        build = getattr(torchvision.models, arch)
        return build(weights=None, num_classes=num_classes, zero_init_residual=zero_init_residual)
    import_oneflow()
    import flowvision

    build = getattr(flowvision.models, arch)
    return build(pretrained=False, num_classes=num_classes, zero_init_residual=zero_init_residual)


def build_embedder(framework: str, dim: int = 128, width_mult: float = 1.0) -> Any:
    """A MobileNetV2 backbone + linear projection + L2 normalisation (the case-study-2 embedder)."""
    flow_or_torch, nn, F = nn_namespace(framework)
    if dim < 1:
        raise ValueError("dim must be >= 1")
    if framework == "torch":
        import torchvision

        backbone = torchvision.models.mobilenet_v2(weights=None, width_mult=width_mult)
    else:
        import warnings

        import flowvision

        with (
            warnings.catch_warnings()
        ):  # flowvision asks for ReLU6(inplace=True), which OneFlow runs out of place
            warnings.filterwarnings("ignore", message="ReLU6 module do not support inplace")
            backbone = flowvision.models.mobilenet_v2(pretrained=False, width_mult=width_mult)

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


def load_numpy_state(module: Any, state: dict[str, np.ndarray], strict: bool = True) -> None:
    """Load NumPy arrays into a torch or OneFlow module, checking keys and shapes first.

    BatchNorm ``num_batches_tracked`` counters are not copied (training bookkeeping only).
    Raises ``KeyError`` naming missing/unexpected keys and ``ValueError`` naming mis-shaped ones.
    """
    fw, _, _ = nn_namespace(framework_of(module))
    target = module.state_dict()
    missing = sorted(k for k in target if k not in state and not _is_counter(k))
    unexpected = sorted(k for k in state if k not in target and not _is_counter(k))
    if strict and (missing or unexpected):

        def show(keys: list[str]) -> str:
            return (
                ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
                if keys
                else "none"
            )

        raise KeyError(
            f"weights do not match the model: missing {show(missing)}; unexpected {show(unexpected)}"
        )
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
    # BatchNorm step counters are training bookkeeping (and 0-d tensors OneFlow reshapes): keep the model's own.
    new_state = {
        k: fw.tensor(np.ascontiguousarray(state[k]))
        for k in target
        if k in state and not _is_counter(k)
    }
    for k in target:
        if k not in new_state:
            new_state[k] = target[k]
    module.load_state_dict(new_state)


def transfer_weights(src: Any, dst: Any, strict: bool = True) -> Any:
    """Copy every weight of ``src`` into ``dst`` (torch -> OneFlow, OneFlow -> torch, or same framework)."""
    load_numpy_state(dst, state_dict_numpy(src), strict=strict)
    return dst


def twin(module: Any, framework: str, builder: Any, *args: Any, **kwargs: Any) -> Any:
    """Build ``builder(framework, *args, **kwargs)`` and give it ``module``'s weights and train/eval mode."""
    other = builder(framework, *args, **kwargs)
    transfer_weights(module, other)
    other.train(module.training)
    return other


def calibrate_batchnorm(module: Any, x: Any) -> Any:
    """Set every BatchNorm's running mean/variance to the statistics of batch ``x`` (no weight changes).

    A randomly initialised network in eval mode normalises with mean 0 / variance 1, which lets
    activations drift until its outputs hardly depend on the input (every image gets almost the
    same embedding). One forward pass in train mode with ``momentum=1`` replaces those running
    statistics by ``x``'s, so outputs vary with the input, as a trained model's do. Works for
    torch and OneFlow modules; returns ``module`` in eval mode.
    """
    fw, _, _ = nn_namespace(framework_of(module))
    if not hasattr(x, "shape") or len(x.shape) < 2 or x.shape[0] < 2:
        raise ValueError(
            "calibrate_batchnorm needs a batch of at least 2 inputs (batch statistics of one sample are degenerate)"
        )
    norms = [m for m in module.modules() if hasattr(m, "running_mean") and hasattr(m, "momentum")]
    if not norms:
        raise ValueError(f"{type(module).__name__} has no BatchNorm layers to calibrate")
    saved = [m.momentum for m in norms]
    try:
        for m in norms:
            m.momentum = 1.0
        module.train()
        with fw.no_grad():
            module(x)
    finally:
        for m, momentum in zip(norms, saved):
            m.momentum = momentum
        module.eval()
    return module
