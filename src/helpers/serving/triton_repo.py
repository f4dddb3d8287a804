"""Triton model repositories: ``config.pbtxt`` files built and checked with Triton's own protobuf.

A repository holds ``<repo>/<model>/config.pbtxt`` and numbered version folders with the model
files. Configurations are Triton's ``ModelConfig`` messages (``tritonclient.grpc.model_config_pb2``,
the schema the server parses); every written file is parsed back by :func:`validate_model_dir`.
Layouts: the Python backend running ONNX Runtime or OpenVINO (runs with ``nvidia-pytriton``'s
``tritonserver``), the NGC image's ``onnxruntime`` backend (optionally with TensorRT) and
OneFlow-Serving's ``oneflow`` backend (``INPUT_0``/``OUTPUT_0``, ``flow.save(graph, ...)``'s folder
as ``<version>/model/``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ONEFLOW_SERVING_IMAGE",
    "RUNTIME_MODEL_FILE",
    "ConfigError",
    "TensorSpec",
    "docker_command",
    "oneflow_serving_model",
    "onnxruntime_backend_model",
    "parse_config",
    "python_runtime_model",
    "tree",
    "validate_model_dir",
    "validate_repository",
]

RUNTIME_MODEL_FILE = Path(__file__).with_name("triton_models") / "runtime_model.py"
DTYPES = ("BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16")
DTYPES += ("STRING",)
KINDS = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
TENSORRT_PRECISIONS = ("FP32", "FP16", "INT8")  # the onnxruntime backend's precision_mode values
# The values a backend accepts for a parameter, from the backends' own documentation (Triton's
# schema takes any string): OneFlow-Serving's doc/model_config.md and doc/command_line_tool.md
# (xrt: its --enable-tensorrt / --enable-openvino), and runtime_model.py's runtimes.
PARAMETER_VALUES = {
    ("oneflow", "xrt"): ("tensorrt", "openvino"),
    ("python", "runtime"): ("onnxruntime", "openvino"),
}
# The model file each backend loads from a version folder.
MODEL_FILES = {
    "python": "model.py",
    "oneflow": "model/model.mlir",
    "onnxruntime": "model.onnx",
    "onnxruntime_onnx": "model.onnx",
}
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # Triton 2.51, the server version nvidia-pytriton 0.7.0 ships
ONEFLOW_SERVING_IMAGE = "oneflowinc/oneflow-serving"


class ConfigError(ValueError):
    """A ``config.pbtxt`` or model folder that Triton would reject (the message says which and why)."""


def _pb() -> Any:
    """Triton's ``model_config_pb2`` module (the ``ModelConfig`` schema, from tritonclient[grpc])."""
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: name, Triton data type and dims (without the batch axis)."""

    name: str
    dims: tuple[int, ...]
    dtype: str = "FP32"

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][\w.\-]*", self.name or ""):
            raise ConfigError(f"tensor name {self.name!r} must be a non-empty identifier")
        if self.dtype not in DTYPES:
            raise ConfigError(
                f"tensor {self.name}: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}"
            )
        if not self.dims or any(not isinstance(d, int) or (d < 1 and d != -1) for d in self.dims):
            raise ConfigError(
                f"tensor {self.name}: dims {self.dims!r} must be positive ints (or -1 for variable)"
            )


def make_config(
    name: str,
    *,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    backend: str | None = None,
    platform: str | None = None,
    max_batch_size: int = 0,
    dynamic_batching: bool | Mapping[str, Any] = False,
    kind: str = "KIND_CPU",
    parameters: Mapping[str, str] | None = None,
    gpu_accelerators: Sequence[Mapping[str, Any]] = (),
) -> Any:
    """A checked Triton ``ModelConfig`` message with one instance (a GPU one on GPU 0).
    ``dynamic_batching``: ``False``, ``True`` (Triton's defaults) or ``{max_queue_delay_us,
    preferred_batch_sizes}``; accelerators: ``{"name": ..., **params}``."""
    pb = _pb()
    if bool(backend) == bool(platform):
        raise ConfigError(
            f"model {name}: give exactly one of backend= (e.g. 'python') or platform= (e.g. 'onnxruntime_onnx')"
        )
    if kind not in KINDS:
        raise ConfigError(f"model {name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    cfg = pb.ModelConfig(name=name, max_batch_size=max_batch_size)
    cfg.backend, cfg.platform = backend or "", platform or ""
    for spec, field in [(s, cfg.input) for s in inputs] + [(s, cfg.output) for s in outputs]:
        field.add(
            name=spec.name, data_type=pb.DataType.Value(f"TYPE_{spec.dtype}"), dims=list(spec.dims)
        )
    group = cfg.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value(kind), count=1)
    if kind == "KIND_GPU":
        group.gpus.append(0)
    if dynamic_batching:
        opts = dynamic_batching if isinstance(dynamic_batching, Mapping) else {}
        unknown = set(opts) - {"max_queue_delay_us", "preferred_batch_sizes"}
        if unknown:
            raise ConfigError(f"model {name}: unknown dynamic_batching options {sorted(unknown)}")
        cfg.dynamic_batching.SetInParent()
        if "max_queue_delay_us" in opts:
            cfg.dynamic_batching.max_queue_delay_microseconds = int(opts["max_queue_delay_us"])
        cfg.dynamic_batching.preferred_batch_size.extend(opts.get("preferred_batch_sizes", []))
    for key, value in (parameters or {}).items():
        cfg.parameters[key].string_value = str(value)
    for spec in gpu_accelerators:
        acc = cfg.optimization.execution_accelerators.gpu_execution_accelerator.add(
            name=spec["name"]
        )
        acc.parameters.update({k: str(v) for k, v in spec.items() if k != "name"})
    check_config(cfg)
    return cfg


def parse_config(text: str, source: str = "config.pbtxt") -> Any:
    """Parse ``config.pbtxt`` text with Triton's schema; :class:`ConfigError` names the line and
    column of an unknown field, a wrongly typed value or an unknown enum value."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(text, _pb().ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: not a valid Triton model config: {exc}") from exc


def check_config(cfg: Any, source: str = "config") -> None:
    """Raise :class:`ConfigError` on the first thing Triton, or the backend named in ``cfg``,
    would refuse when loading it (the parser accepts an empty config)."""
    pb = _pb()
    tensors = list(cfg.input) + list(cfg.output)
    names = [t.name for t in tensors]
    batching = cfg.dynamic_batching.preferred_batch_size if cfg.HasField("dynamic_batching") else []
    groups, accel = cfg.instance_group, cfg.optimization.execution_accelerators
    xrt = cfg.parameters["xrt"].string_value if "xrt" in cfg.parameters else ""
    rules = [  # (a problem exists, what it is)
        (not cfg.name, "no name"),
        (not (cfg.backend or cfg.platform), "neither backend nor platform is set"),
        (not cfg.input or not cfg.output, "needs at least one input and one output"),
        (cfg.max_batch_size < 0, f"max_batch_size must be >= 0, got {cfg.max_batch_size}"),
        (len(set(names)) != len(names), f"tensor names must be unique, got {names}"),
        (any(g.count < 1 for g in groups), "instances (instance group count) must be >= 1"),
        (
            any(g.kind == pb.ModelInstanceGroup.KIND_CPU and g.gpus for g in groups),
            "a KIND_CPU instance group cannot list gpus",
        ),
        (
            (xrt == "tensorrt" or "tensorrt" in [a.name for a in accel.gpu_execution_accelerator])
            and any(g.kind != pb.ModelInstanceGroup.KIND_GPU for g in groups),
            "TensorRT runs on GPU instances: use kind='KIND_GPU'",
        ),
        (
            cfg.HasField("dynamic_batching") and cfg.max_batch_size < 1,
            "dynamic batching needs max_batch_size >= 1",
        ),
        (any(b < 1 for b in batching), "preferred batch sizes must be positive"),
        (
            any(b > cfg.max_batch_size for b in batching),
            f"preferred batch sizes {list(batching)} exceed max_batch_size {cfg.max_batch_size}",
        ),
    ]
    for t in tensors:
        rules.append((t.data_type == pb.TYPE_INVALID, f"tensor {t.name} has no data_type"))
        bad_dims = not t.dims or any(d < 1 and d != -1 for d in t.dims)
        rules.append((bad_dims, f"tensor {t.name} has invalid dims {list(t.dims)}"))
    # Rules of the backends' own documentation, not of Triton's schema: OneFlow-Serving's
    # doc/model_config.md (INPUT_<i>/OUTPUT_<i>) and the onnxruntime_backend README (GPU
    # accelerators tensorrt and cuda, CPU accelerator openvino: it refuses others as "unknown
    # Execution Accelerator"; TensorRT's precision_mode FP32, FP16 or INT8). Triton's server
    # checks the rest (tests/serving/test_triton_server.py loads these layouts into it).
    if cfg.backend == "oneflow":
        for role, group in (("INPUT", cfg.input), ("OUTPUT", cfg.output)):
            got = [t.name for t in group]
            want = [f"{role}_{i}" for i in range(len(got))]
            rules.append((got != want, f"the oneflow backend names tensors {want}, got {got}"))
    for (backend, key), allowed in PARAMETER_VALUES.items():
        value = cfg.parameters[key].string_value if key in cfg.parameters else ""
        wrong = cfg.backend == backend and value and value not in allowed
        rules.append((wrong, f"parameter {key}={value!r} is not one of {', '.join(allowed)}"))
    if cfg.backend == "onnxruntime" or cfg.platform == "onnxruntime_onnx":
        gpu = accel.gpu_execution_accelerator
        bad = [a.name for a in gpu if a.name not in ("tensorrt", "cuda")]
        bad += [a.name for a in accel.cpu_execution_accelerator if a.name != "openvino"]
        known = "tensorrt/cuda (GPU) and openvino (CPU)"
        rules.append((bad, f"the onnxruntime backend knows accelerators {known}, not {bad}"))
        modes = {a.parameters.get("precision_mode", "FP32") for a in gpu if a.name == "tensorrt"}
        wrong = " ".join(map(repr, sorted(modes - set(TENSORRT_PRECISIONS))))
        allowed = ", ".join(TENSORRT_PRECISIONS)
        rules.append((wrong, f"TensorRT precision_mode is one of {allowed}, got {wrong}"))
    problems = [what for wrong, what in rules if wrong]
    if problems:
        raise ConfigError(f"{source} (model {cfg.name or '?'}): {problems[0]}")


def validate_model_dir(model_dir: str | Path) -> Any:
    """Parse (:func:`parse_config`) and check (:func:`check_config`) one model folder: its
    ``config.pbtxt``, name, versions and model files."""
    model_dir = Path(model_dir)
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        raise ConfigError(f"{model_dir}: no config.pbtxt")
    cfg = parse_config(path.read_text(encoding="utf-8"), str(path))
    check_config(cfg, str(path))
    if cfg.name != model_dir.name:
        raise ConfigError(
            f"{path}: name {cfg.name!r} differs from its folder name {model_dir.name!r}"
        )
    versions = sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise ConfigError(f"{model_dir}: no numeric version folder (e.g. {model_dir.name}/1/)")
    needed = {cfg.default_model_filename or MODEL_FILES.get(cfg.backend or cfg.platform)}
    if cfg.backend == "python" and "model_file" in cfg.parameters:
        needed.add(cfg.parameters["model_file"].string_value)
    for version in versions:
        for rel in sorted(filter(None, needed)):
            if not (version / rel).exists():
                raise ConfigError(f"{version}: missing {rel} (for {cfg.backend or cfg.platform})")
    return cfg


def validate_repository(repo: str | Path) -> dict[str, Any]:
    """Validate every model of a repository; returns ``{model name: ModelConfig}``."""
    repo = Path(repo)
    if not repo.is_dir():
        raise ConfigError(f"model repository {repo} does not exist")
    models = {
        p.name: validate_model_dir(p)
        for p in sorted(repo.iterdir())
        if p.is_dir() and not p.name.startswith(".")
    }
    if not models:
        raise ConfigError(f"model repository {repo} holds no models")
    return models


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link big weight files (they appear in several repositories); copy code and small files."""
    if os.path.exists(dst):
        os.remove(dst)
    if os.path.getsize(src) >= 1 << 20:
        with contextlib.suppress(OSError):  # another file system: copy
            return os.link(src, dst)
    shutil.copy2(src, dst)


def _write_model(cfg: Any, repo: str | Path, files: Mapping[str, str | Path]) -> Path:
    """Write ``<repo>/<name>/config.pbtxt`` and ``files`` (``{name in version 1: source}``)."""
    model_dir = Path(repo) / cfg.name
    for rel, src in files.items():
        src, dst = Path(src), model_dir / "1" / rel
        if not src.exists():
            raise FileNotFoundError(f"model {cfg.name}: source {src} for {rel} does not exist")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(src), str(dst))
    from google.protobuf import text_format

    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(cfg), encoding="utf-8")
    validate_model_dir(model_dir)
    return model_dir


def python_runtime_model(
    repo: str | Path,
    name: str,
    model_path: str | Path,
    *,
    runtime: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    max_batch_size: int = 0,
    dynamic_batching: bool | Mapping[str, Any] = False,
    kind: str = "KIND_CPU",
    threads: int = 1,
) -> Path:
    """A Python-backend model running ``runtime`` on the file ``model_path``, stored under its own
    name in version 1 beside ``model.py`` (a copy of :data:`RUNTIME_MODEL_FILE`)."""
    if not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be a positive int, got {threads!r}")
    stored = Path(model_path).name
    if stored == "model.py":
        raise ConfigError("the model file cannot be called model.py (the Python backend's code)")
    params = {"runtime": runtime, "model_file": stored, "threads": str(threads)}
    shape = dict(inputs=inputs, outputs=outputs, max_batch_size=max_batch_size)
    serving = dict(dynamic_batching=dynamic_batching, kind=kind)
    cfg = make_config(name, backend="python", parameters=params, **shape, **serving)
    return _write_model(cfg, repo, {"model.py": RUNTIME_MODEL_FILE, stored: model_path})


def onnxruntime_backend_model(
    repo: str | Path,
    name: str,
    onnx_path: str | Path,
    *,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    max_batch_size: int = 16,
    dynamic_batching: bool | Mapping[str, Any] = True,
    tensorrt: str | None = None,
    kind: str = "KIND_GPU",
) -> Path:
    """The NGC image's ``onnxruntime`` backend; ``tensorrt='FP16'`` (or 'FP32', 'INT8') adds TensorRT."""
    trt = {"name": "tensorrt", "precision_mode": tensorrt, "max_workspace_size_bytes": 1 << 30}
    cfg = make_config(
        name,
        platform="onnxruntime_onnx",
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching,
        kind=kind,
        gpu_accelerators=[trt] if tensorrt else [],
    )
    return _write_model(cfg, repo, {"model.onnx": onnx_path})


def oneflow_serving_model(
    repo: str | Path,
    name: str,
    saved_graph: str | Path,
    *,
    input_dims: Sequence[int],
    output_dims: Sequence[int],
    xrt: str | None = None,
    kind: str = "KIND_GPU",
) -> Path:
    """The OneFlow-Serving layout of the folder ``flow.save(graph, folder)`` wrote: ``1/model/``,
    ``INPUT_0``/``OUTPUT_0``; ``xrt`` switches on OneFlow's TensorRT (GPU) or OpenVINO (CPU) in
    ``config.pbtxt``, the alternative to case study 1's ``--enable-tensorrt`` start option."""
    if not (Path(saved_graph) / "model.mlir").is_file():
        raise ConfigError(
            f"{saved_graph} is not a saved OneFlow graph (no model.mlir): write it with flow.save(graph, folder)"
        )
    cfg = make_config(
        name,
        backend="oneflow",
        inputs=[TensorSpec("INPUT_0", tuple(input_dims))],
        outputs=[TensorSpec("OUTPUT_0", tuple(output_dims))],
        max_batch_size=1,
        kind=kind,
        parameters={"xrt": xrt} if xrt else None,
    )
    return _write_model(cfg, repo, {"model": saved_graph})


def docker_command(
    repo: str | Path,
    *,
    image: str = NGC_IMAGE,
    model: str | None = None,
    server: str = "tritonserver",
) -> str:
    """The ``docker run`` line serving ``repo`` (or only its ``model``) with all GPUs; ``server``
    is the binary in the image. For readers with Docker and a GPU; not run by the course."""
    repo = Path(repo).resolve()
    mount = f"-v {repo}:/models" if model is None else f"-v {repo / model}:/models/{model}"
    return (
        f"docker run --rm --gpus all --shm-size=1g -p 8000:8000 -p 8001:8001 -p 8002:8002 {mount} \\\n"
        f"    {image} {server} --model-repository=/models"
    )


def tree(repo: str | Path) -> str:
    """A text listing of a repository (folders first, 12 entries a folder), like ``tree -L 3``."""
    lines = [Path(repo).name + "/"]

    def walk(folder: Path, prefix: str, depth: int) -> None:
        shown = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        for i, entry in enumerate(shown[:12]):
            last = i == len(shown[:12]) - 1 and len(shown) <= 12
            mark = "/" if entry.is_dir() else ""
            lines.append(f"{prefix}{'`-- ' if last else '|-- '}{entry.name}{mark}")
            if entry.is_dir() and depth < 3:
                walk(entry, prefix + ("    " if last else "|   "), depth + 1)
        if len(shown) > 12:
            lines.append(f"{prefix}`-- ... ({len(shown) - 12} more)")

    walk(Path(repo), "", 1)
    return "\n".join(lines)
