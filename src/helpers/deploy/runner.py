"""The uniform runner: one compiled model of any runtime, run and timed alike.

:func:`helpers.deploy.runtimes.create_session` (ONNX Runtime) and
:func:`~helpers.deploy.runtimes.openvino_model` return a :class:`Runner`: ``run(x)`` takes and
returns NumPy, ``benchmark(x)`` returns a :class:`~helpers.measure.measurement.Measurement`
whose ``meta`` names runtime, device, precision, math mode and threads. On a GPU ``benchmark``
times the session with I/O binding (:meth:`Runner.bind`): the input is copied to the device
once and the output stays there, the same work as a PyTorch model timed on device tensors.
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
    """One input batch bound to an ONNX Runtime session's device with I/O binding.

    Calling it runs the session with no host<->device copy: the input was copied to ``device``
    once (``OrtValue.ortvalue_from_numpy(x, 'cuda', 0)``), the output is bound to the same device
    (``bind_output(name, 'cuda', 0)``) and stays there; the call returns when the outputs are
    ready (``synchronize_outputs``), so a clock around it measures the work. :meth:`output`
    copies the last output to the host, for checking it.
    """

    session: Any = field(repr=False)
    binding: Any = field(repr=False)
    value: Any = field(repr=False)  # the bound input: kept alive as long as the binding
    device: str
    batch: int

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.binding)
        self.binding.synchronize_outputs()

    def output(self) -> np.ndarray:
        """The first output of the last call, copied to the host as NumPy."""
        return self.binding.copy_outputs_to_cpu()[0]


@dataclass
class Runner:
    """A compiled model of some runtime: ``run(x) -> y`` on NumPy arrays, plus ``benchmark``.

    ``framework`` is the name :func:`helpers.measure.timer.benchmark` knows ('onnxruntime', 'openvino');
    ``backend`` names what executes it (an ONNX Runtime provider or an OpenVINO device) and
    ``precision`` the arithmetic it really runs in, so every figure can state it.
    ``device`` is where it computes ('cpu', 'cuda:0'), ``math_mode`` the precision policy's mode
    of that arithmetic (the tolerance a comparison with it takes:
    ``precision.tolerance(runner.math_mode, ...)``) and ``threads`` the CPU threads it was given.
    """

    name: str
    framework: str
    backend: str
    precision: str
    input_name: str
    output_name: str
    input_rank: int | None
    _call: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    handle: Any = field(
        default=None, repr=False
    )  # the session / compiled model, for anything not wrapped
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
        """True for an ONNX Runtime session that computes on a GPU (CUDA or TensorRT EP)."""
        return self.framework == "onnxruntime" and self.device != "cpu"

    def bind(self, x: Any) -> BoundRun:
        """Bind batch ``x`` to this ONNX Runtime session's device (I/O binding): see :class:`BoundRun`.

        Works on every provider, the CPU's included (then the device is the host and nothing is
        copied either way); OpenVINO runners have no I/O binding and raise ``TypeError``.
        """
        if self.framework != "onnxruntime":
            raise TypeError(f"{self.name}: I/O binding is an ONNX Runtime feature")
        import onnxruntime as ort

        arr = self._input(x)
        kind, _, index = self.device.partition(":")
        device_id = int(index or 0)
        value = ort.OrtValue.ortvalue_from_numpy(arr, kind, device_id)
        binding = self.handle.io_binding()
        binding.bind_ortvalue_input(self.input_name, value)
        binding.bind_output(self.output_name, kind, device_id)
        return BoundRun(self.handle, binding, value, self.device, int(len(arr)))

    def run(self, x: Any, *, io_binding: bool = False) -> np.ndarray:
        """Run one batch (a float32 NumPy array or a CPU tensor) and return the first output.

        ``io_binding=True`` runs it through :meth:`bind` (the path :meth:`benchmark` times on a
        GPU) and copies the output back, so that path can be checked like the plain one.
        """
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
        """Time one batch ``x`` (warm-up, repeats; items = batch size), labelled with what ran it.

        ``io_binding=None`` (default) binds input and output to the device when the session runs
        on a GPU (:attr:`on_device`): the timed calls then do no host<->device copies, like a
        PyTorch model timed on tensors already on the GPU; on the CPU the plain :meth:`run`
        (NumPy in and out) is timed. ``meta`` names runtime, backend, device, precision, math
        mode, threads, batch and whether I/O binding was used.
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
