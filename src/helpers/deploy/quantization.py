"""INT8 post-training static quantization (ONNX Runtime QDQ, OpenVINO NNCF) and accuracy checks.

Deployment weights are frozen, so their scales can be chosen once; activations need a
*calibration set* of representative inputs to pick their ranges. Both paths here take
that set as a NumPy array of network inputs::

    rep = quantize_onnx("model.onnx", "model_int8.onnx", calib_x)   # quant_pre_process, then QDQ, per-channel
    ov_int8 = quantize_openvino("model.onnx", calib_x)              # NNCF on the OpenVINO model
    acc = accuracy(runner, val.x, val.y)                            # top-1 on a held-out split

An empty calibration set raises a clear error (there is nothing to choose the scales from).
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ACTIVATION_TYPES = ("uint8", "int8")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def _check_calibration(x: Any, what: str = "calibration set") -> np.ndarray:
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


def _calibration_reader_base() -> type:
    from onnxruntime.quantization import CalibrationDataReader

    return CalibrationDataReader


class ArrayCalibrationReader:
    """An ONNX Runtime ``CalibrationDataReader`` that feeds a NumPy array in batches.

    Built by :func:`calibration_reader`, which makes it a real subclass of ONNX Runtime's base class.
    """

    def __init__(self, x: Any, input_name: str = "input", batch_size: int = 8) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.x = _check_calibration(x)
        self.input_name = input_name
        self.batch_size = batch_size
        self._it: Iterator[dict[str, np.ndarray]] = iter(())
        self.rewind()

    def __len__(self) -> int:
        return -(-len(self.x) // self.batch_size)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(
            [
                {self.input_name: self.x[i : i + self.batch_size]}
                for i in range(0, len(self.x), self.batch_size)
            ]
        )


def calibration_reader(x: Any, input_name: str = "input", batch_size: int = 8) -> Any:
    """An :class:`ArrayCalibrationReader` that is also an ``onnxruntime.quantization.CalibrationDataReader``."""
    cls = type("ArrayCalibrationReader", (ArrayCalibrationReader, _calibration_reader_base()), {})
    return cls(x, input_name=input_name, batch_size=batch_size)


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
        return (
            f"{self.tool} -> {where}: {self.calibration_size} calibration images, "
            f"{'per-channel' if self.per_channel else 'per-tensor'} int8 weights, {self.activation} activations"
            f"{nodes}, {self.seconds:.1f} s"
        )


def _input_name(path: Path) -> str:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    return next(v.name for v in model.graph.input if v.name not in inits)


def preprocess_for_quantization(src: str | Path, dst: str | Path) -> Path:
    """ONNX Runtime's ``quant_pre_process``: symbolic shape inference + graph optimisation (BN folded into
    conv, so its scale is quantized with the conv weights) + ONNX shape inference. Run it before quantizing."""
    from onnxruntime.quantization import quant_pre_process

    src = Path(src)
    if not src.is_file():
        raise FileNotFoundError(f"no ONNX file at {src}")
    quant_pre_process(str(src), str(dst))
    return Path(dst)


def quantize_onnx(
    src: str | Path,
    dst: str | Path,
    calibration: Any,
    *,
    per_channel: bool = True,
    activation: str = "uint8",
    method: str = "minmax",
    batch_size: int = 8,
    preprocess: bool = True,
    input_name: str | None = None,
) -> QuantReport:
    """Static INT8 quantization with ONNX Runtime: QDQ format, int8 weights (per-channel by default).

    ``activation='uint8'`` (U8S8) suits x86 CPUs: AVX-512 VNNI / AMX multiply unsigned 8-bit activations
    by signed 8-bit weights natively. ``'int8'`` (S8S8, symmetric) is what TensorRT's INT8 expects.
    ``method`` picks how activation ranges are read from the calibration set (``minmax`` is fast and
    usually enough for CNNs; ``entropy``/``percentile`` clip outliers but need more memory and time).
    With ``preprocess`` the model goes through :func:`preprocess_for_quantization` first.
    """
    from onnxruntime.quantization import CalibrationMethod

    from helpers.deploy.export import op_counts

    x = _check_calibration(calibration)
    if activation not in ACTIVATION_TYPES:
        raise ValueError(
            f"activation must be one of {', '.join(ACTIVATION_TYPES)}, got {activation!r}"
        )
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise FileNotFoundError(f"no ONNX file at {src}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model_in = src
    if preprocess:
        model_in = preprocess_for_quantization(src, dst.with_name(dst.stem + ".pre.onnx"))
    name = input_name or _input_name(model_in)
    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }
    quiet = (
        _PreprocessHintFilter() if not preprocess else None
    )  # the caller chose to skip it: no need to nag
    if quiet:
        logging.getLogger().addFilter(quiet)
    try:
        _quantize_static(
            model_in, dst, x, name, batch_size, per_channel, activation, methods[method]
        )
    finally:
        if quiet:
            logging.getLogger().removeFilter(quiet)
    return QuantReport(
        path=dst,
        tool="ONNX Runtime quantize_static (QDQ)",
        calibration_size=len(x),
        per_channel=per_channel,
        activation=activation,
        seconds=time.perf_counter() - start,
        op_counts=op_counts(dst),
        settings={"method": method, "preprocess": preprocess},
    )


class _PreprocessHintFilter(logging.Filter):
    """Drops ONNX Runtime's 'please run pre-processing' warning (and only that one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-process" not in record.getMessage()


def _quantize_static(
    model_in: Path,
    dst: Path,
    x: np.ndarray,
    name: str,
    batch_size: int,
    per_channel: bool,
    activation: str,
    method: Any,
) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    with contextlib.redirect_stdout(io.StringIO()):  # the histogram methods print progress lines
        quantize_static(
            str(model_in),
            str(dst),
            calibration_reader(x, name, batch_size),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8 if activation == "uint8" else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=method,
            extra_options={"ActivationSymmetric": activation == "int8", "WeightSymmetric": True},
        )


def quantize_openvino(
    model: Any,
    calibration: Any,
    *,
    dst: str | Path | None = None,
    preset: str = "performance",
    fast_bias_correction: bool = True,
) -> tuple[Any, QuantReport]:
    """INT8 post-training quantization of an ONNX file or ``openvino.Model`` with NNCF.

    Calibration items are fed one image at a time (NNCF collects its statistics per sample).
    ``preset='performance'`` uses symmetric int8 weights and activations, ``'mixed'`` asymmetric
    activations. Returns the quantized ``openvino.Model`` (compile it with
    :func:`helpers.deploy.runtimes.openvino_model`) and a report; ``dst`` also saves it as OpenVINO IR.
    """
    import nncf
    import openvino as ov

    x = _check_calibration(calibration)
    presets = {
        "performance": nncf.QuantizationPreset.PERFORMANCE,
        "mixed": nncf.QuantizationPreset.MIXED,
    }
    if preset not in presets:
        raise ValueError(f"preset must be one of {', '.join(presets)}, got {preset!r}")
    if isinstance(model, (str, Path)):
        if not Path(model).is_file():
            raise FileNotFoundError(f"no model file at {model}")
        model = ov.Core().read_model(str(model))
    elif not isinstance(model, ov.Model):
        raise TypeError(f"model must be a path or an openvino.Model, got {type(model).__name__}")
    start = time.perf_counter()
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(
        logging.WARNING
    )  # NNCF's INFO lines and progress bars would flood the notebook
    try:
        dataset = nncf.Dataset([x[i : i + 1] for i in range(len(x))])
        quantized = nncf.quantize(
            model,
            dataset,
            subset_size=len(x),
            preset=presets[preset],
            fast_bias_correction=fast_bias_correction,
        )
    finally:
        nncf_logger.setLevel(level)
    path = None
    if dst is not None:
        path = Path(dst)
        path.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(quantized, str(path))
    fq = sum(1 for op in quantized.get_ops() if op.get_type_name() == "FakeQuantize")
    return quantized, QuantReport(
        path=path,
        tool="OpenVINO NNCF",
        calibration_size=len(x),
        per_channel=True,
        activation="int8" if preset == "performance" else "uint8 (asymmetric)",
        seconds=time.perf_counter() - start,
        op_counts={"FakeQuantize": fq},
        settings={"preset": preset, "fast_bias_correction": fast_bias_correction},
    )


# --------------------------------------------------------------------------- evaluation


def as_predict_fn(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A NumPy -> NumPy function for a :class:`helpers.deploy.runtimes.Runner`, a PyTorch module or any callable."""
    if hasattr(model, "run") and hasattr(model, "framework"):
        return model.run
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is part of the course environment
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):

        def predict(x: np.ndarray) -> np.ndarray:
            was_training = model.training
            model.eval()
            try:
                device = next(model.parameters()).device
                with torch.inference_mode():
                    return (
                        model(torch.from_numpy(np.ascontiguousarray(x)).to(device))
                        .float()
                        .cpu()
                        .numpy()
                    )
            finally:
                model.train(was_training)

        return predict
    if callable(model):
        return model
    raise TypeError(
        f"cannot predict with a {type(model).__name__}: give a Runner, a torch.nn.Module or a function"
    )


def predict(model: Any, x: Any, batch_size: int = 32) -> np.ndarray:
    """Outputs of ``model`` on all of ``x``, computed ``batch_size`` inputs at a time."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    x = _check_calibration(x, what="input set")
    fn = as_predict_fn(model)
    return np.concatenate(
        [np.asarray(fn(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
    )


def accuracy(model: Any, x: Any, y: Any, batch_size: int = 32) -> float:
    """Top-1 accuracy of a classifier (``Runner``, PyTorch module or function returning logits) on ``(x, y)``."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class indices, got shape {y.shape}")
    if len(y) != len(x):
        raise ValueError(f"{len(x)} inputs but {len(y)} labels")
    logits = predict(model, x, batch_size)
    if logits.ndim != 2:
        raise ValueError(f"expected (samples, classes) logits, got shape {logits.shape}")
    return float(np.mean(logits.argmax(axis=1) == y))
