"""Static graphs: OneFlow ``nn.Graph`` classes (chapter 3's ``#@save`` cells at the end), and
:func:`measure_static`, which times a static variant's build, first call (compile) and steady
state apart. A OneFlow graph compiles on its first call for that call's exact shapes and dtypes.
Importing this module imports OneFlow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from helpers.core.checks import check_int
from helpers.core.environment import import_oneflow, quiet_native_stderr
from helpers.measure.measurement import Measurement
from helpers.measure.timer import benchmark, synchronize
from helpers.workload.models import framework_of

__all__ = [
    "InferenceGraph",
    "TrainGraph",
    "make_inference_graph",
    "StaticMeasurement",
    "measure_static",
    "with_steady",
]

flow = import_oneflow()  # the notebook's setup cell does the same before the page's classes


def make_inference_graph(model: Any) -> InferenceGraph:
    """``InferenceGraph(model)``, with a clear error for a PyTorch module."""
    if not isinstance(model, flow.nn.Module):
        try:
            fw = framework_of(model)
        except TypeError:
            fw = type(model).__name__
        raise TypeError(
            f"nn.Graph needs a OneFlow nn.Module, got a {fw} object ({type(model).__name__}); "
            "convert a PyTorch model first (helpers.workload.models.twin / transfer_weights)"
        )
    # the first graph of a process logs a harmless 'no CUDA driver' line on CPU-only machines
    with quiet_native_stderr():
        return InferenceGraph(model)


@dataclass
class StaticMeasurement:
    """Cost of a static variant: building it, its first call(s) (compiling), its steady state."""

    label: str
    build_s: float  # constructing the graph / trace / script object
    first_call_s: float  # the first call (or first calls), where compilation happens
    steady: Measurement

    @property
    def compile_s(self) -> float:
        """Paid once before the steady state: build + first call(s) - one steady call each."""
        calls = self.steady.meta.get("first_calls", 1)
        return max(self.build_s + self.first_call_s - calls * self.steady.median, 0.0)

    def __str__(self) -> str:
        return (
            f"{self.label}: build {self.build_s:.2f} s, first call {self.first_call_s:.2f} s, "
            f"then {self.steady.median * 1e3:.2f} ms per call (p50 of {len(self.steady.times_s)})"
        )


def measure_static(
    build: Callable[[], Callable[..., Any]],
    *args: Any,
    label: str,
    framework: str,
    first_calls: int = 1,
    items: int = 1,
) -> tuple[Callable[..., Any], StaticMeasurement]:
    """``build()`` a static variant; time that, its first ``first_calls`` calls (TorchScript
    optimises during two, OneFlow graphs and ``torch.compile`` compile on the first) and one
    steady call. Returns the callable and the measurement: time the steady state apart
    (interleaved with eager mode) and attach it with :func:`with_steady`."""
    if not callable(build):
        raise TypeError(
            f"build must be callable and return the static variant, got {type(build).__name__}"
        )
    check_int("first_calls", first_calls)
    synchronize(framework)
    start = time.perf_counter()
    fn = build()
    synchronize(framework)
    build_s = time.perf_counter() - start
    if not callable(fn):
        raise TypeError(f"build() returned a {type(fn).__name__}, which cannot be called")
    start = time.perf_counter()
    for _ in range(first_calls):
        out = fn(*args)
        synchronize(framework)
        if framework == "oneflow" and hasattr(out, "numpy"):
            out.numpy()  # a OneFlow graph returns before its work is done
    first_s = time.perf_counter() - start
    steady = benchmark(
        lambda: fn(*args), label=label, framework=framework, warmup=0, repeats=1, items=items
    )
    steady.meta["first_calls"] = first_calls
    return fn, StaticMeasurement(label, build_s, first_s, steady)


def with_steady(measured: StaticMeasurement, steady: Measurement) -> StaticMeasurement:
    """``measured``'s build and first-call cost with ``steady`` (timed apart, e.g. interleaved
    with eager mode by :func:`helpers.measure.timer.benchmark_interleaved`) as its steady state."""
    if not isinstance(measured, StaticMeasurement):
        raise TypeError(f"expected a StaticMeasurement, got {type(measured).__name__}")
    if not isinstance(steady, Measurement):
        raise TypeError(f"steady must be a Measurement, got {type(steady).__name__}")
    steady.meta.setdefault("first_calls", measured.steady.meta.get("first_calls", 1))
    return StaticMeasurement(measured.label, measured.build_s, measured.first_call_s, steady)


# ---- saved from notebooks/03_dynamic_to_static.ipynb by tools/save_cells.py: edit it there ----
class InferenceGraph(flow.nn.Graph):
    """An nn.Graph running model(x): the module joins in __init__, logic in build."""

    def __init__(self, model):
        super().__init__()
        self.model = model  # 1. declare: the module joins the graph...

    def build(self, x):
        return self.model(x)  # ...and build() holds the logic


class TrainGraph(flow.nn.Graph):
    """An nn.Graph running one training step: forward, loss, backward, the update."""

    def __init__(self, model, optimizer, loss_fn=None):
        super().__init__()
        self.model = model
        self.loss_fn = flow.nn.CrossEntropyLoss() if loss_fn is None else loss_fn
        self.add_optimizer(optimizer)  # the optimizer joins the graph too

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()  # inside build: compiled with the forward pass and the update
        return loss


# ---- end of cells saved from notebooks/03_dynamic_to_static.ipynb ----
