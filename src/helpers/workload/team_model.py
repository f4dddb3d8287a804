"""The team's original PyTorch "business model" of case study 1: a ResNet backbone + a small task head.

This module is deliberately written as ordinary PyTorch code, the way the team wrote it before
any migration: plain ``import torch`` / ``import torchvision`` lines, an ``nn.Module``, a training
loop and a serving helper. Chapter 1 migrates this very file to OneFlow: it copies the file and
edits its four import lines on the page, and it imports the file unchanged under
``oneflow.mock_torch`` (:mod:`helpers.porting.migration`), as chapters 2 and 3 do too. So keep it
free of course-specific code and of framework branches, and keep its import lines as they are.
"""

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

__all__ = ["BusinessModel", "train_steps", "predict", "compile_for_serving"]

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101")


class TaskHead(nn.Module):
    """The task-specific part: pooled backbone features -> class logits."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 256, dropout: float = 0.2):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, features):
        return self.fc2(self.dropout(F.relu(self.fc1(features))))


class BusinessModel(nn.Module):
    """A torchvision backbone (its last linear layer removed) followed by a :class:`TaskHead`;
    ``zero_init_residual`` is torchvision's (ResNets: each residual block starts as its shortcut).
    """

    def __init__(
        self,
        arch: str = "resnet101",
        num_classes: int = 8,
        hidden: int = 256,
        dropout: float = 0.2,
        zero_init_residual: bool = False,
    ):
        super().__init__()
        if not callable(getattr(torchvision.models, arch, None)):
            raise ValueError(f"torchvision.models has no model {arch!r} (the case study: {ARCHS})")
        if num_classes < 1 or hidden < 1:
            raise ValueError(f"num_classes and hidden must be >= 1, got {num_classes} and {hidden}")
        # random weights: nothing is downloaded
        resnet = arch.startswith(("resnet", "resnext", "wide_resnet"))  # they have the option
        options = {"zero_init_residual": True} if zero_init_residual and resnet else {}
        backbone = getattr(torchvision.models, arch)(**options)
        parent, name, last = _last_linear(backbone)
        setattr(parent, name, nn.Identity())  # the backbone now ends with its features
        self.backbone = backbone
        self.head = TaskHead(last.in_features, num_classes, hidden, dropout)

    def forward(self, images):
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError("expected images of shape (batch, 3, height, width)")
        return self.head(torch.flatten(self.backbone(images), 1))


def _last_linear(backbone):
    """(parent module, attribute name, layer) of the backbone's last ``nn.Linear``: a ResNet's
    ``fc``, a MobileNet's ``classifier[3]``."""
    found = None
    for parent in backbone.modules():
        for name, child in parent.named_children():
            if type(child).__name__ == "Linear":  # by name: whichever framework built it
                found = (parent, name, child)
    if found is None:
        raise ValueError(f"{type(backbone).__name__} has no linear layer to replace by the head")
    return found


def train_steps(
    model, images, labels, steps: int, batch_size: int = 8, lr: float = 0.05, momentum: float = 0.9
):
    """Train ``model`` for ``steps`` SGD steps on ``(images, labels)`` tensors, cycling through them in order.

    Returns the loss of every step as Python floats.
    """
    if steps < 1 or batch_size < 1:
        raise ValueError("steps and batch_size must be >= 1")
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model.train()
    losses = []
    n = images.shape[0]
    for step in range(steps):
        start = (step * batch_size) % n
        x, y = images[start : start + batch_size], labels[start : start + batch_size]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    model.eval()
    return losses


def predict(model, images):
    """Class probabilities for a batch of images (eval mode, no gradients)."""
    model.eval()
    with torch.no_grad():
        return F.softmax(model(images), dim=1)


def compile_for_serving(model):
    """The team's deployment step: PyTorch 2's compiler (``torch.compile``) around the model."""
    return torch.compile(model)
