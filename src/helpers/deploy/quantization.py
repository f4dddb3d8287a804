"""INT8 post-training static quantization with ONNX Runtime, as chapter 8 writes it.

Chapter 8's page writes a ``CalibrationDataReader`` and ``quantize_static`` (QDQ, per-channel
weights); chapter 9 serves its INT8 model, so ``tools/save_cells.py`` copies those cells to the
end of this module. Above them: the checks of a calibration set and settings, and the report.
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

from helpers.core import hardware
from helpers.core.checks import check_int
from helpers.deploy import export

__all__ = [
    "check_calibration",
    "check_settings",
    "QuantReport",
    "ArrayCalibrationReader",
    "quantize_onnx",
]

# The activations' 8-bit type -> ONNX Runtime's (weights are always signed int8 here), and how
# their ranges are read from the calibration set.
ACTIVATION_TYPES: dict[str, Any] = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
CALIBRATION_METHODS: dict[str, Any] = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


def check_calibration(x: Any, what: str = "calibration set") -> np.ndarray:
    """``x`` as a contiguous float32 array of network inputs, or a clear error saying why not."""
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


def check_settings(activation: str, method: str) -> tuple[Any, Any]:
    """ONNX Runtime's enums for ``activation`` and ``method``; a ValueError names the choices."""
    for name, value, choices in (
        ("activation", activation, ACTIVATION_TYPES),
        ("method", method, CALIBRATION_METHODS),
    ):
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return ACTIVATION_TYPES[activation], CALIBRATION_METHODS[method]


@dataclass
class QuantReport:
    """What a quantization produced: the file, the settings and how long it took."""

    path: Path
    tool: str
    calibration_size: int
    per_channel: bool
    activation: str
    seconds: float
    op_counts: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        """One row of a :class:`helpers.show.Table`: the file, its settings, Q/DQ nodes, seconds."""
        return {
            "file": self.path.name,
            "tool": self.tool,
            "activations": self.activation,
            "weights": ("per-channel" if self.per_channel else "per-tensor")
            + (", 7-bit" if self.settings.get("reduce_range") else ""),
            "calibration images": self.calibration_size,
            "Q/DQ nodes": sum(
                self.op_counts.get(op, 0) for op in ("QuantizeLinear", "DequantizeLinear")
            ),
            "seconds": self.seconds,
        }

    def __str__(self) -> str:
        r = self.as_row()
        return (
            f"{self.tool} -> {r['file']}: {r['calibration images']} calibration images, "
            f"{r['weights']} int8 weights, {self.activation} activations, "
            f"{r['Q/DQ nodes']} Q/DQ nodes, {self.seconds:.1f} s"
        )


# ---- saved from notebooks/08_int8_quantization.ipynb by tools/save_cells.py: edit it there ----
# The lesson's listing: a calibration reader and static INT8 quantization to QDQ.
class ArrayCalibrationReader(CalibrationDataReader):
    """Feeds NumPy network inputs to ONNX Runtime's calibrator, a batch at a time."""

    def __init__(self, x: Any, input_name: str = "input", batch_size: int = 8) -> None:
        self.x, self.input_name = check_calibration(x), input_name
        self.batch_size = check_int("batch_size", batch_size)
        self.rewind()

    def __len__(self) -> int:
        return -(-len(self.x) // self.batch_size)

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next ``{input name: batch}``; None when the set is used up."""
        return next(self._batches, None)

    def rewind(self) -> None:
        """Start again at the first batch (a calibrator may read the set twice)."""
        n, b = len(self.x), self.batch_size
        self._batches = iter([{self.input_name: self.x[i : i + b]} for i in range(0, n, b)])


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
    reduce_range: bool | None = None,
) -> QuantReport:
    """Static INT8 with ONNX Runtime: QDQ format, int8 weights, calibrated activations.

    ``activation``: ``'uint8'`` (U8S8 with the int8 weights) or ``'int8'`` (S8S8);
    ``symmetric=True`` pins the activations' zero point at 0 (TensorRT needs it).
    ``method`` reads the activation ranges: ``minmax``, ``entropy`` or ``percentile``.
    ``preprocess`` runs ONNX Runtime's ``quant_pre_process`` first.
    ``reduce_range``: 7-bit weights; None chooses them where int8 kernels saturate.
    """
    x = check_calibration(calibration)
    activation_type, calibrate_method = check_settings(activation, method)
    if reduce_range is None:  # an x86 CPU without VNNI: 16-bit pair sums overflow
        reduce_range = hardware.int8_saturates()
    src, dst = Path(src), Path(dst)
    name = input_name or export.graph_inputs(src)[0]  # a missing file fails here
    dst.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if preprocess:  # shape inference; BatchNorm folded into its conv: rounded once
        pre = dst.with_name(dst.stem + ".pre.onnx")
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # ch. 8, sec. 2
        src = pre
    with contextlib.redirect_stdout(io.StringIO()):  # histogram methods print progress
        quantize_static(
            str(src),
            str(dst),
            ArrayCalibrationReader(x, name, batch_size),  # the calibration set
            quant_format=QuantFormat.QDQ,  # QuantizeLinear/DequantizeLinear pairs
            per_channel=per_channel,  # one weight scale per output channel
            activation_type=activation_type,  # QUInt8 (U8S8) or QInt8 (S8S8)
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,  # 7-bit weights: no pair of products overflows
            calibrate_method=calibrate_method,
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
    seconds, ops = time.perf_counter() - start, export.op_counts(dst)
    tool = "ONNX Runtime quantize_static (QDQ)"
    act = activation + " symmetric" * symmetric
    settings = dict(method=method, preprocess=preprocess, reduce_range=reduce_range)
    return QuantReport(dst, tool, len(x), per_channel, act, seconds, ops, settings)


# ---- end of cells saved from notebooks/08_int8_quantization.ipynb ----
