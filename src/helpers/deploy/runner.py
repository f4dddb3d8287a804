"""The uniform runner: one compiled model of any runtime, run and timed alike.

``run(x)`` takes and returns NumPy; ``benchmark(x)`` returns a ``Measurement`` whose ``meta``
names runtime, device, precision, math mode and threads; on a GPU it times with I/O binding
(:meth:`Runner.bind`): the same work as a PyTorch model timed on device tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.measure.measurement import Measurement
from helpers.measure.timer import benchmark

__all__ = ["Runner"]


@dataclass
class BoundRun:
    """One input batch bound to an ONNX Runtime session's device (I/O binding): a call copies
    nothing between host and device and returns when the outputs are ready
    (``synchronize_outputs``), so a clock around it measures the work."""

    session: Any = field(repr=False)
    binding: Any = field(repr=False)
    value: Any = field(repr=False)  # the bound input: kept alive as long as the binding

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)
        self.binding.synchronize_outputs()

    def output(self) -> np.ndarray:
        """The first output of the last call, copied to the host as NumPy."""
        return self.binding.copy_outputs_to_cpu()[0]


@dataclass
class Runner:
    """A compiled model of some runtime: ``run(x) -> y`` on NumPy arrays, plus ``benchmark``.

    ``framework``: the name :func:`helpers.measure.timer.benchmark` knows; ``backend``: the
    provider or device executing it; ``precision``: the arithmetic it really runs in;
    ``math_mode``: the precision policy's mode (``precision.tolerance(runner.math_mode, ...)``).
    """

    name: str
    framework: str
    backend: str
    precision: str
    input_name: str
    output_name: str
    input_rank: int | None
    _call: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    handle: Any = field(default=None, repr=False)  # the session / compiled model
    info: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    math_mode: str = "fp32"
    threads: int | str = "default"

    def _input(self, x: Any) -> np.ndarray:
        """``x`` as a contiguous float32 NumPy batch of the model's rank, or a clear error."""
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        if not isinstance(x, np.ndarray):
            raise TypeError(
                f"{self.name}: input must be a NumPy array or a tensor, got {type(x).__name__}"
            )
        if self.input_rank is not None and x.ndim != self.input_rank:
            raise ValueError(
                f"{self.name}: input {self.input_name!r} has rank {x.ndim} (shape {x.shape}); "
                f"the model expects rank {self.input_rank}"
            )
        return np.ascontiguousarray(x, dtype=np.float32)

    @property
    def on_device(self) -> bool:
        """True for an ONNX Runtime session that computes on a GPU."""
        return self.framework == "onnxruntime" and self.device != "cpu"

    def bind(self, x: Any) -> BoundRun:
        """Bind batch ``x`` to this session's device (any provider; OpenVINO: ``TypeError``)."""
        if self.framework != "onnxruntime":
            raise TypeError(f"{self.name}: I/O binding is an ONNX Runtime feature")
        import onnxruntime as ort

        arr = self._input(x)
        kind, _, index = self.device.partition(":")
        value = ort.OrtValue.ortvalue_from_numpy(arr, kind, int(index or 0))
        binding = self.handle.io_binding()
        binding.bind_ortvalue_input(self.input_name, value)
        binding.bind_output(self.output_name, kind, int(index or 0))
        return BoundRun(self.handle, binding, value)

    def run(self, x: Any, *, io_binding: bool = False) -> np.ndarray:
        """The first output for one batch; ``io_binding=True``: through :meth:`bind`, for checks."""
        if io_binding:
            bound = self.bind(x)
            bound()
            return bound.output()
        return self._call(self._input(x))

    __call__ = run

    def benchmark(
        self,
        x: Any,
        *,
        label: str | None = None,
        warmup: int = 3,
        repeats: int = 10,
        progress: bool = False,
        io_binding: bool | None = None,
    ) -> Measurement:
        """Time one batch ``x`` (items = batch size), ``meta`` naming what ran it and how.

        ``io_binding=None`` binds on a GPU (:attr:`on_device`: no host<->device copies, like a
        PyTorch model timed on device tensors) and times the plain :meth:`run` on the CPU.
        """
        arr = self._input(x)
        bound = self.on_device if io_binding is None else bool(io_binding)
        fn: Callable[[], Any] = self.bind(arr) if bound else (lambda: self.run(arr))
        m = benchmark(
            fn,
            label=label or f"{self.name} (batch {len(arr)})",
            framework=self.framework,
            warmup=warmup,
            repeats=repeats,
            items=int(len(arr)),
            progress=progress,
        )
        m.meta.update(
            runtime=self.name,
            backend=self.backend,
            device=self.device,
            precision=self.precision,
            math_mode=self.math_mode,
            threads=self.threads,
            batch=int(len(arr)),
            io_binding=bound,
        )
        return m

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.framework} on {self.backend} ({self.device}), {self.precision}, "
            f"{self.threads} threads"
        )
