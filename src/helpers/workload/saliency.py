"""The case study's deployed task, forward -> backward -> forward, and its pruned variants.

The service needs the gradient of the top class score with respect to the *input image*
(a saliency map), not a weight update. The team's first version (``"original"``) was
written like a training step: every parameter requires grad, an optimizer step is left
in (with a learning rate of 0, so the weights never change and nobody noticed), and a
second forward pass runs whose result is never used. Chapter 4 prunes it step by step:

====================  =================================================================
variant               what changes (cumulative)
====================  =================================================================
``original``          as first written: parameter grads, ``zero_grad`` + ``step``, 2nd forward
``frozen_params``     parameters ``requires_grad_(False)``: only the input gradient is computed
``no_update``         the optimizer (``zero_grad`` / ``step``) is removed
``single_forward``    the unused second forward is removed: the pruned task
====================  =================================================================

Every variant returns the same :class:`TaskResult` (logits of the first forward and the
saliency map), so a notebook can assert that pruning changed nothing but the time.

Three ways to run a variant:

- :func:`make_task` -- eager PyTorch or eager OneFlow (same code, ``nn_namespace`` picks the framework);
- :func:`make_graph_task` -- a OneFlow ``nn.Graph``. OneFlow 0.9.0 cannot return an input's
  ``.grad`` from a graph (``backward`` inside ``build`` needs an optimizer, and
  ``flow.autograd.grad`` in graphs was still an open pull request). The supported route,
  used by OneFlow's own test ``test_graph_grad.py``: add a zero "input-gradient holder"
  parameter to the input and give the graph an SGD optimizer with ``lr=1`` for it; after
  one step the holder holds ``0 - 1 * grad = -grad`` exactly. It is reset to zero before
  every call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from helpers.workload.models import framework_of, nn_namespace

VARIANTS: tuple[str, ...] = ("original", "frozen_params", "no_update", "single_forward")
STEPS: dict[str, str] = {
    "original": "as first written: parameter grads + optimizer step + unused 2nd forward",
    "frozen_params": "freeze parameters: only the input gradient is computed",
    "no_update": "remove the optimizer zero_grad/step",
    "single_forward": "remove the unused second forward",
}
# The optimizer the team left in: SGD with momentum, learning rate 0 (weights never change).
LEFTOVER_LR = 0.0
LEFTOVER_MOMENTUM = 0.9


class TaskResult(NamedTuple):
    """What the service returns: the first forward's logits and the saliency map ``(batch, H, W)``."""

    logits: Any
    saliency: Any


@dataclass(frozen=True)
class _Plan:
    params_require_grad: bool
    optimizer_step: bool
    second_forward: bool


def plan(variant: str) -> _Plan:
    """What a variant does (raises a clear error for an unknown variant name)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown task variant {variant!r}; use one of {', '.join(VARIANTS)}")
    i = VARIANTS.index(variant)
    return _Plan(params_require_grad=i < 1, optimizer_step=i < 2, second_forward=i < 3)


def saliency_from_grad(grad: Any) -> Any:
    """Saliency map from an input gradient ``(batch, C, H, W)``: max over channels of ``|grad|``."""
    if grad is None:
        raise ValueError("no input gradient: did the input require grad and was backward called?")
    if grad.dim() != 4:
        raise ValueError(
            f"expected an input gradient of shape (batch, C, H, W), got {tuple(grad.shape)}"
        )
    return grad.abs().max(dim=1)[0]


def top_class_score(logits: Any) -> Any:
    """The scalar whose input gradient is the saliency map: sum over the batch of each top logit.

    In eval mode the samples of a batch do not interact, so each sample's gradient is its own.
    """
    return logits.max(dim=1)[0].sum()


def _check_model(model: Any) -> str:
    fw = framework_of(model)
    if not hasattr(model, "parameters") or not callable(model):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError(
            "the deployed task runs the model in eval mode: call model.eval() first "
            "(in train mode BatchNorm would mix the samples of a batch)"
        )
    return fw


def _check_input(x: Any, fw: str) -> None:
    if framework_of(x) != fw:
        raise TypeError(f"input is a {framework_of(x)} tensor but the model is a {fw} module")
    if x.dim() != 4:
        raise ValueError(f"expected images of shape (batch, 3, H, W), got {tuple(x.shape)}")


def make_task(model: Any, variant: str) -> Callable[[Any], TaskResult]:
    """An eager PyTorch or OneFlow version of the task ``variant`` on a private copy of ``model``.

    The copy keeps variants independent (each sets its own ``requires_grad`` flags). The model
    must be in eval mode, as in the deployed service.
    """
    p = plan(variant)
    fw = _check_model(model)
    flow_or_torch, _, _ = nn_namespace(fw)
    net = copy.deepcopy(model)
    for param in net.parameters():
        param.requires_grad_(p.params_require_grad)
    optimizer = None
    if p.optimizer_step:
        optimizer = flow_or_torch.optim.SGD(
            net.parameters(), lr=LEFTOVER_LR, momentum=LEFTOVER_MOMENTUM
        )

    def task(x: Any) -> TaskResult:
        _check_input(x, fw)
        if optimizer is not None:
            optimizer.zero_grad()
        x = x.detach().clone().requires_grad_(True)
        logits = net(x)
        top_class_score(logits).backward()
        if optimizer is not None:
            optimizer.step()
        if p.second_forward:
            net(x)  # computed and thrown away, as in the first version
        return TaskResult(logits.detach(), saliency_from_grad(x.grad))

    task.variant = variant  # type: ignore[attr-defined]
    task.module = net  # type: ignore[attr-defined]
    return task


class GraphTask:
    """The task ``variant`` compiled as a OneFlow ``nn.Graph`` for one input shape.

    Call it with a OneFlow tensor of ``input_shape``; ``.graph`` is the ``nn.Graph`` (compiled on
    the first call), for op counts with :func:`helpers.compiling.graph_ops.oneflow_op_counts`.
    """

    def __init__(self, model: Any, variant: str, input_shape: tuple[int, ...]) -> None:
        p = plan(variant)
        if _check_model(model) != "oneflow":
            raise TypeError(
                "make_graph_task needs a OneFlow module (nn.Graph is OneFlow's); "
                "for PyTorch use make_task or torch.compile"
            )
        if len(input_shape) != 4 or any(int(d) < 1 for d in input_shape):
            raise ValueError(
                f"input_shape must be (batch, 3, H, W) with positive sizes, got {input_shape}"
            )
        flow, nn, _ = nn_namespace("oneflow")
        self.variant = variant
        self.input_shape = tuple(int(d) for d in input_shape)
        net = copy.deepcopy(model)
        for param in net.parameters():
            param.requires_grad_(p.params_require_grad)

        class WithGradHolder(nn.Module):
            """model(x + holder): the holder's gradient is the input's gradient."""

            def __init__(self) -> None:
                super().__init__()
                self.net = net
                weight = next(net.parameters())
                self.holder = nn.Parameter(
                    flow.zeros(*input_shape, dtype=weight.dtype, device=weight.device)
                )

            def forward(self, x: Any) -> Any:
                return self.net(x + self.holder)

        self.module = WithGradHolder()
        groups: list[dict[str, Any]] = [
            {"params": [self.module.holder], "lr": 1.0, "momentum": 0.0}
        ]
        if p.optimizer_step:  # the leftover update of every weight, as in the first version
            groups.insert(
                0,
                {
                    "params": list(net.parameters()),
                    "lr": LEFTOVER_LR,
                    "momentum": LEFTOVER_MOMENTUM,
                },
            )
        optimizer = flow.optim.SGD(groups, lr=1.0)
        module = self.module

        class TaskGraph(nn.Graph):
            def __init__(self) -> None:
                super().__init__()
                self.model = module
                self.add_optimizer(optimizer)

            def build(self, x: Any) -> Any:
                logits = self.model(x)
                top_class_score(logits).backward()
                if p.second_forward:
                    self.model(x)  # not returned; the compiler keeps it anyway (see the op counts)
                return logits

        from helpers.core.environment import quiet_native_stderr

        with (
            quiet_native_stderr()
        ):  # the first nn.Graph of a process prints a harmless "no CUDA driver" line on CPU
            self.graph = TaskGraph()
        self._flow = flow

    def __call__(self, x: Any) -> TaskResult:
        _check_input(x, "oneflow")
        if tuple(x.shape) != self.input_shape:
            raise ValueError(
                f"this graph was built for input shape {self.input_shape}, got {tuple(x.shape)}; "
                "an nn.Graph has static shapes: build one GraphTask per shape"
            )
        with self._flow.no_grad():
            self.module.holder.zero_()
        logits = self.graph(x)
        # SGD with lr=1 on a zero holder: holder = -grad, so |holder| = |grad| exactly.
        saliency = self.module.holder.detach().abs().max(dim=1)[0]
        return TaskResult(logits, saliency)


def make_graph_task(model: Any, variant: str, input_shape: tuple[int, ...]) -> GraphTask:
    """:class:`GraphTask` for ``variant`` (OneFlow only; the graph compiles on the first call)."""
    return GraphTask(model, variant, input_shape)


def task_peak_memory(
    task: Callable[[Any], TaskResult], x: Any, device: Any = "cpu"
) -> dict[str, Any]:
    """Peak extra tensor memory of one call of a PyTorch ``make_task`` task (see ``profiling.torch_peak_memory``).

    Gradients left by earlier calls are dropped first, so each variant is measured from the same
    clean state and ``retained`` shows the weight gradients a variant leaves behind.
    """
    from helpers.perf.profiling import torch_peak_memory

    module = getattr(task, "module", None)
    if module is None or framework_of(module) != "torch":
        raise TypeError("task_peak_memory needs a PyTorch task made by make_task")

    def drop_grads() -> None:
        for param in module.parameters():
            param.grad = None

    return torch_peak_memory(lambda: task(x), device=device, setup=drop_grads)
