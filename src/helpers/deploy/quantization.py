"""INT8 post-training static quantization with ONNX Runtime, as chapter 8 writes it.

Chapter 8 writes the quantization on its page: a ``CalibrationDataReader`` subclass that feeds
the calibration set, and ``quantize_static`` with the QDQ format, the activation and weight
types and per-channel weight scales. Chapter 9 serves the INT8 model it makes, so
``tools/save_cells.py`` copies those cells into the region at the end of this module (edit them
on the page, not here)::

    rep = quantize_onnx("model.onnx", "model_int8.onnx", calib_x)   # quant_pre_process, QDQ

Above the region, plumbing: :func:`check_calibration` (an empty, non-float or non-finite
calibration set is a clear error, not a silently bad model), :class:`QuantReport` and the
accepted settings. Accuracy and batch-wise prediction live in :mod:`helpers.workload.predict`.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_static,
)

from helpers.deploy.export import graph_inputs, op_counts

__all__ = [
    "ACTIVATION_TYPES",
    "CALIBRATION_METHODS",
    "check_calibration",
    "QuantReport",
    "ArrayCalibrationReader",
    "quantize_onnx",
]

# The activations' 8-bit type -> ONNX Runtime's; weights are always signed int8 here.
ACTIVATION_TYPES: dict[str, Any] = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
# How activation ranges are read from the calibration set.
CALIBRATION_METHODS: dict[str, Any] = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


def check_calibration(x: Any, what: str = "calibration set") -> np.ndarray:
    """``x`` as a contiguous float32 array of network inputs, or a clear error saying what is wrong."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"the {what} must be a NumPy array of network inputs, got {type(x).__name__}"
        )
    if x.ndim == 0 or len(x) == 0:
        raise ValueError(
            f"the {what} is empty: static quantization needs representative inputs "
            "to choose the activation scales (a few hundred images is typical; even 8 beats none)"
        )
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(
            f"the {what} must hold float network inputs (normalised images), got dtype {x.dtype}"
        )
    if not np.isfinite(x).all():
        raise ValueError(f"the {what} contains NaN or inf values")
    return np.ascontiguousarray(x, dtype=np.float32)


@dataclass
class QuantReport:
    """What a quantization produced: the file, the settings and how long it took."""

    path: Path | None
    tool: str
    calibration_size: int
    per_channel: bool
    activation: str
    seconds: float
    op_counts: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        where = self.path.name if self.path else "in memory"
        shown = [
            f"{self.op_counts[op]} {op}"
            for op in ("QuantizeLinear", "DequantizeLinear", "FakeQuantize")
            if op in self.op_counts
        ]
        nodes = f", {' / '.join(shown)} nodes" if shown else ""
        weights = "per-channel" if self.per_channel else "per-tensor"
        return (
            f"{self.tool} -> {where}: {self.calibration_size} calibration images, "
            f"{weights} int8 weights, {self.activation} activations{nodes}, {self.seconds:.1f} s"
        )


# ---- saved from notebooks/08_int8_quantization.ipynb by tools/save_cells.py: edit it there ----
class ArrayCalibrationReader(CalibrationDataReader):
    """Feeds a NumPy array of network inputs to ONNX Runtime's calibrator, a batch at a time."""

    def __init__(self, x: Any, input_name: str = "input", batch_size: int = 8) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.x = check_calibration(x)
        self.input_name, self.batch_size = input_name, batch_size
        self.rewind()

    def __len__(self) -> int:
        return -(-len(self.x) // self.batch_size)

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next ``{input name: batch}``; None when the set is used up."""
        return next(self._batches, None)

    def rewind(self) -> None:
        """Start again at the first batch (a calibrator may read the set more than once)."""
        starts = range(0, len(self.x), self.batch_size)
        self._batches = iter([{self.input_name: self.x[i : i + self.batch_size]} for i in starts])


def quantize_onnx(
    src: str | Path,
    dst: str | Path,
    calibration: Any,
    *,
    per_channel: bool = True,
    activation: str = "uint8",
    symmetric: bool = False,
    method: str = "minmax",
    batch_size: int = 8,
    preprocess: bool = True,
    input_name: str | None = None,
) -> QuantReport:
    """Static INT8 quantization with ONNX Runtime: QDQ format, int8 weights, calibrated activations.

    ``activation`` is the activations' type, ``'uint8'`` (U8S8 with the int8 weights) or
    ``'int8'`` (S8S8); ``symmetric=True`` pins their zero point at 0, which TensorRT requires.
    ``per_channel`` gives each output channel of a weight its own scale. ``method`` reads the
    activation ranges from the calibration set: ``minmax`` (fast, usually enough for CNNs),
    ``entropy`` or ``percentile`` (clip rare outliers; slower, they keep histograms).
    With ``preprocess``, ONNX Runtime's ``quant_pre_process`` runs first.
    """
    x = check_calibration(calibration)
    if activation not in ACTIVATION_TYPES:
        raise ValueError(
            f"activation must be one of {', '.join(ACTIVATION_TYPES)}, got {activation!r}"
        )
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    src, dst = Path(src), Path(dst)
    name = input_name or graph_inputs(src)[0]  # a missing file fails here, clearly
    dst.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if preprocess:  # shape inference, and BatchNorm folded into the conv: its weights round once
        pre = dst.with_name(dst.stem + ".pre.onnx")
        quant_pre_process(str(src), str(pre))
        src = pre
    with contextlib.redirect_stdout(io.StringIO()):  # the histogram methods print progress
        quantize_static(
            str(src),
            str(dst),
            ArrayCalibrationReader(x, name, batch_size),
            quant_format=QuantFormat.QDQ,  # QuantizeLinear/DequantizeLinear pairs around each op
            per_channel=per_channel,
            activation_type=ACTIVATION_TYPES[activation],
            weight_type=QuantType.QInt8,
            calibrate_method=CALIBRATION_METHODS[method],
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
    return QuantReport(
        path=dst,
        tool="ONNX Runtime quantize_static (QDQ)",
        calibration_size=len(x),
        per_channel=per_channel,
        activation=activation + (" symmetric" if symmetric else ""),
        seconds=time.perf_counter() - start,
        op_counts=op_counts(dst),
        settings={"method": method, "preprocess": preprocess},
    )


# ---- end of cells saved from notebooks/08_int8_quantization.ipynb ----
