"""Case study 1's task, forward -> backward -> forward, and the variants chapter 4 prunes it to.

The article says only that the deployment needs a backward pass without a model update. The
course's task: the gradient of the top class score with respect to the *input image* (a saliency
map), first written like a training step: parameter grads, an optimizer step with lr 0, and a
second forward nobody reads. ``STEPS`` says what each of ``VARIANTS`` removes (cumulative).

Chapter 4's page writes the variants and the ``nn.Graph`` version (``#@save`` cells at the end of
this module; OneFlow 0.9.0 cannot return an input's ``.grad`` from a graph, so a zero parameter
added to the input and SGD with ``lr=1`` leave ``-grad`` in a holder). Every variant returns the
same ``TaskResult``, so pruning can be shown to change only the time. Importing it imports OneFlow.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any, NamedTuple

from helpers.core.environment import import_oneflow, quiet_native_stderr
from helpers.workload import models
from helpers.workload.models import framework_of

__all__ = [
    "TaskResult",
    "VARIANTS",
    "STEPS",
    "top_class_score",
    "saliency_from_grad",
    "original_task",
    "no_update_task",
    "single_forward_task",
    "make_task",
    "WithGradHolder",
    "TaskGraph",
    "make_graph_task",
    "check_task_args",
    "check_input",
]

flow = import_oneflow()  # the notebook's setup cell does the same before the page's classes


def check_task_args(model: Any, variant: str, input_shape: tuple[int, ...] | None = None) -> str:
    """Check a task's ``variant`` and eval-mode model (with ``input_shape``: a OneFlow module
    and a positive ``(batch, 3, H, W)``); return its framework."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown task variant {variant!r}; use one of {', '.join(VARIANTS)}")
    fw = framework_of(model)
    if not hasattr(model, "parameters") or not callable(model):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError(
            "the deployed task runs the model in eval mode: call model.eval() first "
            "(in train mode BatchNorm would mix the samples of a batch)"
        )
    if input_shape is not None:
        if fw != "oneflow":
            raise TypeError(
                "make_graph_task needs a OneFlow module (nn.Graph is OneFlow's); "
                "for PyTorch use make_task or torch.compile"
            )
        if len(input_shape) != 4 or any(int(d) < 1 for d in input_shape):
            raise ValueError(
                f"input_shape must be (batch, 3, H, W) with positive sizes, got {input_shape}"
            )
    return fw


def check_input(x: Any, fw: str, shape: tuple[int, ...] | None = None) -> None:
    """Check that ``x`` is a batch of images of framework ``fw`` (and, for a graph, of ``shape``)."""
    if framework_of(x) != fw:
        raise TypeError(f"input is a {framework_of(x)} tensor but the model is a {fw} module")
    if x.dim() != 4:
        raise ValueError(f"expected images of shape (batch, 3, H, W), got {tuple(x.shape)}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(
            f"this graph was built for input shape {tuple(shape)}, got {tuple(x.shape)}; "
            "an nn.Graph has static shapes: build one graph task per shape"
        )


# ---- saved from notebooks/04_pruning.ipynb by tools/save_cells.py: edit it there ----
class TaskResult(NamedTuple):
    """The service's answer: the first forward's logits and one (H, W) map per image."""

    logits: Any
    saliency: Any


def top_class_score(logits):
    """The scalar whose input gradient is the saliency map: the top logits, summed.

    In eval mode images of a batch do not interact: each image's gradient is its own.
    """
    return logits.max(dim=1)[0].sum()


def saliency_from_grad(grad):
    """|d score / d input|, max over colour channels: an (H, W) map per image."""
    return grad.abs().max(dim=1)[0]


def original_task(net, optimizer, x):
    """The task as first written; `optimizer`: SGD, lr=0, left over from training."""
    optimizer.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    logits = net(x)  # forward
    # backward: the input's gradient AND every weight's
    top_class_score(logits).backward()
    optimizer.step()  # an "update" with lr=0: the weights never change
    net(x)  # a second forward whose result nobody reads
    return TaskResult(logits.detach(), saliency_from_grad(x.grad))


VARIANTS = ("original", "frozen_params", "no_update", "single_forward")
STEPS = {
    "original": "as first written: weight gradients, optimizer step, 2nd forward",
    "frozen_params": "freeze the weights: only the input's gradient is computed",
    "no_update": "remove the optimizer's zero_grad/step",
    "single_forward": "remove the unused second forward",
}


def no_update_task(net, x):
    """Weights frozen, optimizer removed; the unused second forward is still there."""
    x = x.detach().clone().requires_grad_(True)
    logits = net(x)
    top_class_score(logits).backward()  # frozen weights: the input's gradient only
    net(x)
    return TaskResult(logits.detach(), saliency_from_grad(x.grad))


def single_forward_task(net, x):
    """The pruned task: one forward and the input's gradient, nothing else."""
    x = x.detach().clone().requires_grad_(True)
    logits = net(x)
    top_class_score(logits).backward()
    return TaskResult(logits.detach(), saliency_from_grad(x.grad))


def make_task(model, variant):
    """The task `variant` on a private copy of `model` (PyTorch or OneFlow eager)."""
    fw = check_task_args(model, variant)
    net = copy.deepcopy(model)  # each variant sets its own requires_grad flags
    for param in net.parameters():
        param.requires_grad_(variant == "original")  # step 1 freezes every weight
    if variant in ("original", "frozen_params"):  # the same code, frozen in step 1
        optim = models.nn_namespace(fw)[0].optim
        optimizer = optim.SGD(net.parameters(), lr=0.0, momentum=0.9)
        run = partial(original_task, net, optimizer)
    elif variant == "no_update":
        run = partial(no_update_task, net)
    else:
        run = partial(single_forward_task, net)

    def task(x):
        check_input(x, fw)
        return run(x)

    task.variant, task.module = variant, net
    return task


class WithGradHolder(flow.nn.Module):
    """net(x + holder): the holder is a zero parameter; its gradient is the input's."""

    def __init__(self, net, input_shape):
        super().__init__()
        self.net = net
        w = next(net.parameters())
        self.holder = flow.nn.Parameter(flow.zeros(*input_shape, dtype=w.dtype, device=w.device))

    def forward(self, x):
        return self.net(x + self.holder)


class TaskGraph(flow.nn.Graph):
    """The task as one compiled job: forward, backward, optimizer step, 2nd forward?"""

    def __init__(self, module, optimizer, second_forward):
        super().__init__()
        self.model = module
        self.add_optimizer(optimizer)  # backward() inside build needs an optimizer
        self.second_forward = second_forward

    def build(self, x):
        logits = self.model(x)
        top_class_score(logits).backward()
        if self.second_forward:  # decided once, while the graph is traced
            self.model(x)  # not returned; the compiler keeps it (see the op counts)
        return logits


def make_graph_task(model, variant, input_shape):
    """The task `variant` as a OneFlow nn.Graph for inputs of `input_shape`: task(x)."""
    check_task_args(model, variant, input_shape)
    net = copy.deepcopy(model)
    for param in net.parameters():
        param.requires_grad_(variant == "original")
    module = WithGradHolder(net, input_shape)
    groups = []
    if variant in ("original", "frozen_params"):  # the leftover update of every weight
        groups.append({"params": list(net.parameters()), "lr": 0.0, "momentum": 0.9})
    # SGD with lr=1 on the zero holder: one step leaves 0 - 1 * grad = -grad, exactly
    groups.append({"params": [module.holder], "lr": 1.0, "momentum": 0.0})
    with quiet_native_stderr():  # OneFlow's one-off "no CUDA driver" line on a CPU
        optimizer = flow.optim.SGD(groups, lr=1.0)
        graph = TaskGraph(module, optimizer, variant != "single_forward")

    def task(x):
        check_input(x, "oneflow", shape=input_shape)
        with flow.no_grad():
            module.holder.zero_()  # a fresh holder for every call
        logits = graph(x)
        grad = module.holder.detach()  # -grad: the map takes its absolute value
        return TaskResult(logits, saliency_from_grad(grad))

    task.variant, task.module, task.graph = variant, module, graph
    return task


# ---- end of cells saved from notebooks/04_pruning.ipynb ----
