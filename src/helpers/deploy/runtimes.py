"""ONNX Runtime (TensorRT > CUDA > CPU, the best usable, said) and OpenVINO (an explicit
precision: its CPU plugin silently runs bf16 where it can), each opened as a
:class:`helpers.deploy.runner.Runner`. A provider or device asked for that cannot run here raises
:class:`ProviderUnavailableError`, never a silent fallback.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from helpers.core.checks import check_int
from helpers.core.environment import has_cuda
from helpers.core.tf32 import gpu_tf32_capable, nvidia_tf32_overridden
from helpers.core.threads import threads_spin
from helpers.deploy.runner import Runner
from helpers.show.text import say

__all__ = [
    "ORT_PROVIDERS",
    "OPT_LEVELS",
    "ProviderUnavailableError",
    "provider_status",
    "usable_providers",
    "describe_providers",
    "skip_without_tensorrt",
    "create_session",
    "trt_profile",
    "openvino_model",
    "ov_type_name",
]

_OV_CALL_LOCK = threading.Lock()

# Short names used by the course -> ONNX Runtime's provider names, best first.
ORT_PROVIDERS: dict[str, str] = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}

# ONNX Runtime graph optimisation levels by short name (the order is the order they build on each other).
OPT_LEVELS: tuple[str, ...] = ("disable", "basic", "extended", "layout", "all")
OV_PRECISIONS: tuple[str, ...] = ("f32", "bf16", "f16")
# OpenVINO's precision names -> the precision policy's math modes.
_OV_MODES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "int8": "int8"}


class ProviderUnavailableError(RuntimeError):
    """An execution provider or device was asked for explicitly but cannot run on this machine."""


# --------------------------------------------------------------------------- what is usable here


def _positive(name: str, value: Any) -> None:
    if value is not None:
        check_int(name, value)


def _tensorrt_loadable() -> bool:
    """True when TensorRT 10's runtime library (what onnxruntime-gpu 1.23's TensorRT EP dlopens)
    loads; pip's tensorrt wheels keep it in tensorrt_libs, whose import makes it loadable."""
    with contextlib.suppress(ImportError):
        import tensorrt_libs  # type: ignore[import-not-found]  # noqa: F401
    try:
        ctypes.CDLL("libnvinfer.so.10")
        return True
    except OSError:
        return False


def provider_status() -> dict[str, str]:
    """For each course provider name: ``'usable'`` or the reason it cannot be used on this machine."""
    import onnxruntime as ort

    built = set(ort.get_available_providers())
    status: dict[str, str] = {}
    for short, full in ORT_PROVIDERS.items():
        why = "usable"
        if full not in built:
            has = ", ".join(sorted(built))
            why = f"not in this onnxruntime build ({ort.__version__}; it has {has})"
        elif short != "cpu" and not has_cuda():
            why = "compiled into onnxruntime-gpu, but no CUDA GPU is visible on this machine"
        elif short == "tensorrt" and not _tensorrt_loadable():
            why = (
                "no TensorRT runtime library (libnvinfer.so.10) found; `make setup GPU=1` "
                "installs it (pip tensorrt-cu12, the TensorRT 10 this onnxruntime-gpu links)"
            )
        status[short] = why
    return status


def usable_providers() -> list[str]:
    """Short names of the providers that can run here, best first (always ends with ``'cpu'``)."""
    status = provider_status()
    return [p for p in ORT_PROVIDERS if status[p] == "usable"]


def describe_providers() -> list[dict[str, str]]:
    """One row per provider (name, ONNX Runtime name, status) for a table in a notebook."""
    return [
        {"provider": short, "onnxruntime name": ORT_PROVIDERS[short], "here": why}
        for short, why in provider_status().items()
    ]


def skip_without_tensorrt(what: str) -> bool:
    """True, after one line saying why, when ONNX Runtime's TensorRT EP cannot run here."""
    why = provider_status()["tensorrt"]
    if why == "usable":
        return False
    print(f"SKIPPED on this machine (TensorRT EP: {why}): {what}.")
    return True


def _option_true(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true")


def is_quantized(path: str | Path) -> bool:
    """True when the ONNX file holds quantized arithmetic: QDQ pairs or ``QLinear*`` ops."""
    import onnx

    model = onnx.load(str(_check_path(path)), load_external_data=False)
    return any(n.op_type.startswith(("QLinear", "QuantizeLinear")) for n in model.graph.node)


def ort_math_mode(
    provider: str,
    provider_options: Mapping[str, Any] | None = None,
    *,
    quantized: bool = False,
) -> str:
    """The precision policy's math mode of an ONNX Runtime session on ``provider``.

    CPU: 'fp32' (MLAS). CUDA: 'tf32' unless ``use_tf32`` is 0 (the CUDA EP's option is true
    unless set, ``cuda_execution_provider_info.h``: "By default, enable TF32 ..."). TensorRT:
    'int8' / 'fp16' with ``trt_int8_enable`` / ``trt_fp16_enable``, else 'tf32' (the builder's
    default ``BuilderFlag::kTF32``). A ``quantized`` model: 'int8' everywhere. TF32 needs an
    Ampere-or-newer GPU and is off with ``NVIDIA_TF32_OVERRIDE=0``.
    """
    opts = dict(provider_options or {})
    if provider not in ORT_PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; use one of {', '.join(ORT_PROVIDERS)}")
    if quantized:
        return "int8"
    if provider == "cpu":
        return "fp32"
    device_id = int(opts.get("device_id", 0))
    allowed = not nvidia_tf32_overridden() and gpu_tf32_capable(device_id)  # no GPU: True
    if provider == "tensorrt":
        if _option_true(opts.get("trt_int8_enable", False)):
            return "int8"
        if _option_true(opts.get("trt_fp16_enable", False)):
            return "fp16"
    elif not _option_true(opts.get("use_tf32", True)):
        return "fp32"
    return "tf32" if allowed else "fp32"


def pick_provider(provider: str = "auto") -> str:
    """``provider`` ('auto': the best usable) as a short name usable here, or an error why not."""
    key = str(provider).strip().lower()
    if key == "auto":
        return usable_providers()[0]
    if key not in ORT_PROVIDERS:
        import onnxruntime as ort

        raise ProviderUnavailableError(
            f"execution provider {provider!r} is not installed: the course knows 'auto', "
            f"{', '.join(map(repr, ORT_PROVIDERS))}, and this onnxruntime {ort.__version__} "
            f"build has {', '.join(ort.get_available_providers())}"
        )
    why = provider_status()[key]
    if why != "usable":
        raise ProviderUnavailableError(
            f"execution provider {provider!r} cannot be used here: {why}. "
            f"Usable here: {', '.join(usable_providers())} (or provider='auto')."
        )
    return key


def _rank(shape: Sequence[Any]) -> int | None:
    try:
        return len(shape)
    except TypeError:
        return None


def _check_path(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}")
    return path


# --------------------------------------------------------------------------- ONNX Runtime


def _provider_entry(
    short: str, options: Mapping[str, Any] | None, cache_dir: str | Path | None
) -> Any:
    full = ORT_PROVIDERS[short]
    opts = dict(options or {})
    if short == "tensorrt":
        cache = Path(cache_dir or Path(tempfile.gettempdir()) / "course_trt_cache")
        cache.mkdir(parents=True, exist_ok=True)
        opts.setdefault("trt_engine_cache_enable", True)
        opts.setdefault("trt_engine_cache_path", str(cache))
    return (
        (full, {k: str(v) if isinstance(v, bool) else v for k, v in opts.items()}) if opts else full
    )


def create_session(
    path: str | Path,
    provider: str = "auto",
    *,
    optimization: str = "all",
    intra_op_threads: int | None = None,
    inter_op_threads: int | None = None,
    optimized_model_path: str | Path | None = None,
    spinning: bool | None = None,
    provider_options: Mapping[str, Any] | None = None,
    trt_cache_dir: str | Path | None = None,
    name: str | None = None,
    verbose: bool = True,
) -> Runner:
    """Open ``path`` in ONNX Runtime on ``provider`` ('auto': TensorRT > CUDA > CPU) and say which.

    A provider that cannot run, or a session that quietly fell back to the CPU, raises
    :class:`ProviderUnavailableError`; GPU providers keep the CPU one for unsupported ops.
    ``provider_options`` go to the chosen provider (``{"use_tf32": 0}``: IEEE float32 on CUDA).
    ``optimized_model_path`` gets the graph after its rewrites. ``spinning=False`` stops idle
    workers busy-waiting; None follows PyTorch's policy here (``threads_spin``), so both
    frameworks' threads wait alike. ``precision`` and ``math_mode``: :func:`ort_math_mode`'s;
    ``threads`` are read back from the session ('default': left to ONNX Runtime).
    """
    import onnxruntime as ort

    path = _check_path(path)
    if optimization not in OPT_LEVELS:
        raise ValueError(
            f"unknown graph optimisation level {optimization!r}; use one of {', '.join(OPT_LEVELS)}"
        )
    _positive("intra_op_threads", intra_op_threads)
    _positive("inter_op_threads", inter_op_threads)
    short = pick_provider(provider)
    if short != "cpu":
        # CUDA / cuDNN from torch's nvidia-* wheels; the session below reports a real failure
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    opts = ort.SessionOptions()
    level = "ORT_DISABLE_ALL" if optimization == "disable" else f"ORT_ENABLE_{optimization.upper()}"
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if intra_op_threads is not None:
        opts.intra_op_num_threads = intra_op_threads
    if inter_op_threads is not None:
        opts.inter_op_num_threads = inter_op_threads
    if optimized_model_path is not None:
        Path(optimized_model_path).parent.mkdir(parents=True, exist_ok=True)
        opts.optimized_model_filepath = str(optimized_model_path)
    spin = "1" if (threads_spin() if spinning is None else spinning) else "0"
    for pool in ("intra", "inter"):
        opts.add_session_config_entry(f"session.{pool}_op.allow_spinning", spin)
    opts.log_severity_level = 3  # errors only: chapter 7 explains the serialisation warnings
    providers = [
        _provider_entry(p, provider_options if p == short else None, trt_cache_dir)
        for p in list(ORT_PROVIDERS)[list(ORT_PROVIDERS).index(short) :]
    ]
    start = time.perf_counter()
    sess = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
    session_s = time.perf_counter() - start
    active = sess.get_providers()
    if active[0] != ORT_PROVIDERS[short]:
        raise ProviderUnavailableError(
            f"ONNX Runtime could not start {ORT_PROVIDERS[short]} for {path.name} and "
            f"fell back to {active[0]}; check the CUDA/cuDNN/TensorRT libraries"
        )
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    math_mode = ort_math_mode(short, provider_options, quantized=is_quantized(path))
    # read back from the session (0: ONNX Runtime's default), not from the request
    threads = sess.get_session_options().intra_op_num_threads or "default"
    device_id = int((provider_options or {}).get("device_id", 0))
    device = "cpu" if short == "cpu" else f"cuda:{device_id}"
    runner = Runner(
        name=name or f"ORT {short}",
        framework="onnxruntime",
        backend=active[0],
        precision=math_mode,
        input_name=inp.name,
        output_name=out.name,
        input_rank=_rank(inp.shape),
        _call=lambda x: sess.run([out.name], {inp.name: x})[0],
        handle=sess,
        info={"providers": active, "session_s": session_s},
        device=device,
        math_mode=math_mode,
        threads=threads,
    )
    if verbose:
        why = "best usable provider here" if provider == "auto" else "as requested"
        say(
            f"ONNX Runtime: picked {active[0]} ({why}; usable here: {', '.join(usable_providers())}), "
            f"graph optimisation '{optimization}', {math_mode} on {device}"
        )
    return runner


def trt_profile(
    path: str | Path, min_batch: int = 1, opt_batch: int = 8, max_batch: int = 32
) -> dict[str, str]:
    """TensorRT EP options declaring a dynamic-batch model's batch range (other dims fixed).

    Without them the EP rebuilds its engine (seconds to minutes) for every new batch size.
    """
    import onnx

    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise ValueError(
            f"need 1 <= min_batch <= opt_batch <= max_batch, got {min_batch}, {opt_batch}, {max_batch}"
        )
    model = onnx.load(str(_check_path(path)), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    shapes: dict[str, list[str]] = {"min": [], "opt": [], "max": []}
    for v in (v for v in model.graph.input if v.name not in inits):
        dims = v.type.tensor_type.shape.dim
        rest = [d.dim_value for d in dims[1:]]
        if any(r <= 0 for r in rest):
            shown = [d.dim_param or d.dim_value for d in dims]
            raise ValueError(f"input {v.name!r} has dynamic dimensions besides the batch: {shown}")
        for key, b in (("min", min_batch), ("opt", opt_batch), ("max", max_batch)):
            shapes[key].append(f"{v.name}:" + "x".join(map(str, [b, *rest])))
    return {f"trt_profile_{key}_shapes": ",".join(val) for key, val in shapes.items()}


# --------------------------------------------------------------------------- OpenVINO


def openvino_model(
    model: Any,
    device: str = "CPU",
    *,
    precision: str = "f32",
    threads: int | None = None,
    streams: int = 1,
    name: str | None = None,
    verbose: bool = True,
) -> Runner:
    """Compile an ONNX file, IR (``.xml``) or ``openvino.Model`` for ``device`` at ``precision``.

    ``precision`` is ``INFERENCE_PRECISION_HINT`` ('f32', 'bf16': AVX-512 BF16 or AMX, 'f16'); on
    CPUs with bf16 OpenVINO *defaults* to bf16, so the course always sets it. For an INT8 model
    it is the unquantized layers' precision. ``info['runtime_precisions']``: what really runs.
    ``streams > 1``: the ``THROUGHPUT`` hint with ``NUM_STREAMS`` sharing the threads; the
    runner still calls one request (split a batch across the streams with an async queue).
    """
    import openvino as ov

    if precision not in OV_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(OV_PRECISIONS)}")
    _positive("threads", threads)
    check_int("streams", streams, maximum=threads, why="the streams share the threads")
    core = ov.Core()
    dev = device.upper()
    available = list(core.available_devices)
    if dev not in available:
        raise ProviderUnavailableError(
            f"OpenVINO device {device!r} is not available here (available: "
            f"{', '.join(available) or 'none'}); an Intel GPU needs its OpenCL driver"
        )
    if isinstance(model, (str, Path)):
        model = core.read_model(str(_check_path(model)))
    elif not isinstance(model, ov.Model):
        raise TypeError(f"model must be a path or an openvino.Model, got {type(model).__name__}")
    hint = "LATENCY" if streams == 1 else "THROUGHPUT"
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": hint}
    if streams > 1:
        config["NUM_STREAMS"] = streams
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = core.compile_model(model, dev, config)
    request = compiled.create_infer_request()
    inp, out = compiled.inputs[0], compiled.outputs[0]
    # One process-wide lock serialises calls: an infer request is not thread-safe (threads sharing
    # one got each other's outputs), and two threads' first calls at once deadlocked a pipelined
    # run (the binding initialises statics with the GIL released). The LATENCY hint runs one
    # request at a time anyway; the caller's other work (loading the next batch) still overlaps.
    precisions = runtime_precisions(compiled)
    heavy: collections.Counter[str] = collections.Counter()  # conv / FC layers by precision
    for (layer, p), n in precisions.items():
        if layer in ("Convolution", "FullyConnected"):
            heavy[p] += n
    int8 = bool(heavy.keys() & {"i8", "u8"})  # labelled: its int8 layers + the rest's precision
    label = f"int8 + {precision}" if int8 else precision
    threads_set = compiled.get_property("INFERENCE_NUM_THREADS")

    def call(x: np.ndarray) -> np.ndarray:
        with _OV_CALL_LOCK:
            request.infer({0: x})
            return request.get_output_tensor(0).data.copy()

    runner = Runner(
        name=name or f"OpenVINO {dev} {label}",
        framework="openvino",
        backend=f"OpenVINO {dev}",
        precision=label,
        input_name=inp.get_any_name(),
        output_name=out.get_any_name(),
        input_rank=_rank(inp.get_partial_shape()),
        _call=call,
        handle=compiled,
        info={
            "precision_hint": ov_type_name(compiled.get_property("INFERENCE_PRECISION_HINT")),
            "threads": threads_set,
            "hint": hint,
            "streams": int(compiled.get_property("NUM_STREAMS")),
            "runtime_precisions": precisions,
        },
        device=dev.lower(),
        math_mode=_OV_MODES["int8" if int8 else precision],
        threads=threads_set or "default",
    )
    if verbose:
        say(
            f"OpenVINO: compiled for {dev}, INFERENCE_PRECISION_HINT={precision}, "
            f"{runner.info['threads']} threads; conv/FC layers run in {dict(heavy)}"
        )
    return runner


def ov_type_name(t: Any) -> str:
    """``'f32'`` / ``'bf16'`` for an ``openvino.Type`` (its ``str()`` is ``<Type: 'float32'>``)."""
    return t.to_string()


def runtime_precisions(compiled: Any) -> dict[tuple[str, str], int]:
    """Count ``(layer type, precision)`` of a compiled model's executable graph (what runs)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str) if "layerType" in info else op.get_type_name()
        prec = info["runtimePrecision"].astype(str) if "runtimePrecision" in info else "?"
        counts[(layer, prec)] += 1
    return dict(counts)
