"""Triton model repositories: write ``config.pbtxt`` files and check them with Triton's own protobuf.

A model repository is a folder of models, each ``<repo>/<model>/config.pbtxt`` plus numbered version
folders ``<repo>/<model>/<version>/`` holding the model file(s). Configurations are built as Triton's
``ModelConfig`` protobuf messages (``tritonclient.grpc.model_config_pb2``, the schema the server
itself parses) and written in protobuf text format, so a typo cannot reach the server; every file
is parsed back and checked by :func:`validate_repository`.

Three layouts are written here:

- :func:`python_runtime_model` -- the Python backend running ONNX Runtime, OpenVINO or OneFlow
  (runs with the ``tritonserver`` binary that ships in ``nvidia-pytriton``, no Docker);
- :func:`onnxruntime_backend_model` -- the NGC Triton image's ``onnxruntime`` backend, optionally
  with the TensorRT execution accelerator (production, GPU);
- :func:`oneflow_serving_model` -- the OneFlow-Serving image's ``oneflow`` backend
  (``INPUT_0``/``OUTPUT_0``, the graph saved with ``flow.save(graph, ...)`` as ``<version>/model/``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DTYPES",
    "KINDS",
    "ONEFLOW_SERVING_IMAGE",
    "RUNTIME_MODEL_FILE",
    "ConfigError",
    "TensorSpec",
    "config_text",
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
DTYPES = (
    "BOOL",
    "UINT8",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "STRING",
)
KINDS = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
PYTHON_RUNTIMES = ("onnxruntime", "openvino", "oneflow")
TENSORRT_PRECISIONS = ("FP32", "FP16", "INT8")  # the onnxruntime backend's precision_mode values
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # Triton 2.51, the server version nvidia-pytriton 0.7.0 ships
ONEFLOW_SERVING_IMAGE = "oneflowinc/oneflow-serving"


class ConfigError(ValueError):
    """A ``config.pbtxt`` or model folder that Triton would reject (the message says which and why)."""


def _pb() -> Any:
    """Triton's ``model_config_pb2`` module (the ``ModelConfig`` schema)."""
    # pragma: no cover below: tritonclient[grpc] is pinned in requirements.txt
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            "Triton's model-config protobuf comes with tritonclient[grpc]: "
            "pip install 'tritonclient[grpc]'"
        ) from exc
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
    instances: int = 1,
    kind: str = "KIND_CPU",
    gpus: Sequence[int] | None = None,
    parameters: Mapping[str, str] | None = None,
    gpu_accelerators: Sequence[Mapping[str, Any]] = (),
    cpu_accelerators: Sequence[Mapping[str, Any]] = (),
) -> Any:
    """A Triton ``ModelConfig`` message (see Triton's model-configuration documentation).

    ``dynamic_batching`` is ``False``, ``True`` (Triton's defaults) or a mapping with
    ``max_queue_delay_us`` and/or ``preferred_batch_sizes``. ``instances`` copies of the model run
    side by side (an instance group of ``kind``). Accelerators are mappings ``{"name": ..., **params}``.
    """
    pb = _pb()
    if bool(backend) == bool(platform):
        raise ConfigError(
            f"model {name}: give exactly one of backend= (e.g. 'python') or platform= (e.g. 'onnxruntime_onnx')"
        )
    if kind not in KINDS:
        raise ConfigError(f"model {name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(instances, int) or instances < 1:
        raise ConfigError(f"model {name}: instances must be a positive int, got {instances!r}")
    if not isinstance(max_batch_size, int) or max_batch_size < 0:
        raise ConfigError(
            f"model {name}: max_batch_size must be an int >= 0, got {max_batch_size!r}"
        )
    cfg = pb.ModelConfig(name=name, max_batch_size=max_batch_size)
    if backend:
        cfg.backend = backend
    else:
        cfg.platform = platform
    for spec, field in [(s, cfg.input) for s in inputs] + [(s, cfg.output) for s in outputs]:
        field.add(
            name=spec.name, data_type=pb.DataType.Value(f"TYPE_{spec.dtype}"), dims=list(spec.dims)
        )
    group = cfg.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value(kind), count=instances)
    if gpus:
        group.gpus.extend(gpus)
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
    accel = cfg.optimization.execution_accelerators
    for target, specs in (
        (accel.gpu_execution_accelerator, gpu_accelerators),
        (accel.cpu_execution_accelerator, cpu_accelerators),
    ):
        for spec in specs:
            acc = target.add(name=spec["name"])
            for key, value in spec.items():
                if key != "name":
                    acc.parameters[key] = str(value)
    check_config(cfg)
    return cfg


def config_text(cfg: Any) -> str:
    """The protobuf text format of a ``ModelConfig`` (what goes into ``config.pbtxt``)."""
    from google.protobuf import text_format

    return text_format.MessageToString(cfg)


def parse_config(text: str, source: str = "config.pbtxt") -> Any:
    """Parse ``config.pbtxt`` text with Triton's schema; :class:`ConfigError` names the bad line."""
    from google.protobuf import text_format

    try:
        return text_format.Parse(text, _pb().ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: not a valid Triton model config: {exc}") from exc


def check_config(cfg: Any, source: str = "config") -> None:
    """Semantic checks Triton applies when loading (the parser alone accepts an empty config)."""
    pb = _pb()
    where = f"{source} (model {cfg.name or '?'})"
    if not cfg.name:
        raise ConfigError(f"{where}: no name")
    if not (cfg.backend or cfg.platform):
        raise ConfigError(f"{where}: neither backend nor platform is set")
    if not cfg.input or not cfg.output:
        raise ConfigError(f"{where}: needs at least one input and one output")
    for t in list(cfg.input) + list(cfg.output):
        if t.data_type == pb.TYPE_INVALID:
            raise ConfigError(f"{where}: tensor {t.name} has no data_type")
        if not t.dims or any(d < 1 and d != -1 for d in t.dims):
            raise ConfigError(f"{where}: tensor {t.name} has invalid dims {list(t.dims)}")
    names = [t.name for t in cfg.input] + [t.name for t in cfg.output]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: tensor names must be unique, got {names}")
    if cfg.HasField("dynamic_batching"):
        if cfg.max_batch_size < 1:
            raise ConfigError(f"{where}: dynamic batching needs max_batch_size >= 1")
        if any(b < 1 for b in cfg.dynamic_batching.preferred_batch_size):
            raise ConfigError(f"{where}: preferred batch sizes must be positive")
        too_big = [b for b in cfg.dynamic_batching.preferred_batch_size if b > cfg.max_batch_size]
        if too_big:
            raise ConfigError(
                f"{where}: preferred batch sizes {too_big} exceed max_batch_size {cfg.max_batch_size}"
            )
    for group in cfg.instance_group:
        if group.count < 1:
            raise ConfigError(f"{where}: instance group count must be >= 1")
        if group.kind == pb.ModelInstanceGroup.KIND_CPU and group.gpus:
            raise ConfigError(f"{where}: a KIND_CPU instance group cannot list gpus")
    accel = cfg.optimization.execution_accelerators
    # The backend rules below are not in Triton's schema (names and parameters are free-form strings
    # there); they come from the backends' own documentation:
    # - OneFlow-Serving: github.com/Oneflow-Inc/serving, doc/model_config.md (backend "oneflow",
    #   INPUT_<i>/OUTPUT_<i>, a "model" folder in the version folder, parameter xrt) and
    #   doc/command_line_tool.md (--enable-tensorrt / --enable-openvino: the two xrt values);
    # - onnxruntime: github.com/triton-inference-server/onnxruntime_backend, README.md (GPU
    #   accelerators "tensorrt" and "cuda", CPU accelerator "openvino"; TensorRT's precision_mode
    #   "FP32", "FP16" or "INT8"); the backend refuses others ("unknown Execution Accelerator").
    # Triton's own server checks the rest (see tests/serving/test_triton_server.py, which loads the production
    # layouts into the bundled tritonserver).
    if cfg.backend == "oneflow":
        for i, t in enumerate(cfg.input):
            if t.name != f"INPUT_{i}":
                raise ConfigError(
                    f"{where}: the oneflow backend needs inputs named INPUT_0, INPUT_1, ...; got {t.name}"
                )
        for i, t in enumerate(cfg.output):
            if t.name != f"OUTPUT_{i}":
                raise ConfigError(
                    f"{where}: the oneflow backend needs outputs named OUTPUT_0, ...; got {t.name}"
                )
        xrt = cfg.parameters["xrt"].string_value if "xrt" in cfg.parameters else ""
        if xrt and xrt not in ("tensorrt", "openvino"):
            raise ConfigError(
                f"{where}: OneFlow-Serving's xrt parameter is 'tensorrt' or 'openvino', got {xrt!r}"
            )
    if cfg.backend == "python":
        runtime = cfg.parameters["runtime"].string_value if "runtime" in cfg.parameters else ""
        if runtime and runtime not in PYTHON_RUNTIMES:
            raise ConfigError(
                f"{where}: parameter runtime={runtime!r} is not one of {', '.join(PYTHON_RUNTIMES)}"
            )
    if cfg.backend == "onnxruntime" or cfg.platform == "onnxruntime_onnx":
        bad = [
            a.name for a in accel.gpu_execution_accelerator if a.name not in ("tensorrt", "cuda")
        ]
        bad += [a.name for a in accel.cpu_execution_accelerator if a.name != "openvino"]
        if bad:
            raise ConfigError(
                f"{where}: the onnxruntime backend knows accelerators tensorrt/cuda (GPU) and openvino (CPU), not {bad}"
            )
        for a in accel.gpu_execution_accelerator:
            mode = a.parameters.get("precision_mode", "FP32")
            if a.name == "tensorrt" and mode not in TENSORRT_PRECISIONS:
                raise ConfigError(
                    f"{where}: TensorRT precision_mode is one of {', '.join(TENSORRT_PRECISIONS)}, "
                    f"got {mode!r}"
                )


def _expected_files(cfg: Any) -> list[str]:
    if cfg.default_model_filename:
        return [cfg.default_model_filename]
    if cfg.backend == "python":
        return ["model.py"]
    if cfg.backend == "oneflow":
        return ["model/model.mlir"]
    if cfg.backend == "onnxruntime" or cfg.platform == "onnxruntime_onnx":
        return ["model.onnx"]
    return []


def validate_model_dir(model_dir: str | Path) -> Any:
    """Parse and check one model folder: its ``config.pbtxt``, name, versions and model files.

    The same for every layout (Python backend, NGC ``onnxruntime``, OneFlow-Serving): the file is
    parsed with Triton's ``ModelConfig`` schema (:func:`parse_config`: an unknown field, a value of
    the wrong type or an unknown enum value is a :class:`ConfigError` naming line and column), then
    checked by :func:`check_config`.
    """
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
    for version in versions:
        for rel in _expected_files(cfg):
            if not (version / rel).exists():
                raise ConfigError(
                    f"{version}: missing {rel} (needed by backend {cfg.backend or cfg.platform})"
                )
    if cfg.backend == "python" and "model_file" in cfg.parameters:
        rel = cfg.parameters["model_file"].string_value
        for version in versions:
            if not (version / rel).exists():
                raise ConfigError(f"{version}: missing {rel} (named by parameter model_file)")
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
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another file system: copy
    shutil.copy2(src, dst)


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(src), str(dst))


def write_model(
    repo: str | Path, cfg: Any, files: Mapping[str, str | Path], version: int = 1
) -> Path:
    """Write ``<repo>/<name>/config.pbtxt`` and copy ``files`` (``{name in version folder: source}``)."""
    check_config(cfg)
    if not isinstance(version, int) or version < 1:
        raise ConfigError(f"version must be a positive int, got {version!r}")
    model_dir = Path(repo) / cfg.name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    for rel, src in files.items():
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(f"model {cfg.name}: source {src} for {rel} does not exist")
        (version_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        _copy(src, version_dir / rel)
    (model_dir / "config.pbtxt").write_text(config_text(cfg), encoding="utf-8")
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
    instances: int = 1,
    kind: str = "KIND_CPU",
    threads: int = 1,
    parameters: Mapping[str, str] | None = None,
    file_name: str | None = None,
    version: int = 1,
) -> Path:
    """A Python-backend model running ``runtime`` on ``model_path`` (a file, or a folder for OneFlow).

    The model file is stored in the version folder as ``file_name`` (default: its own name) next to
    ``model.py`` (a copy of :data:`RUNTIME_MODEL_FILE`).
    """
    if runtime not in PYTHON_RUNTIMES:
        raise ConfigError(f"runtime {runtime!r} is not one of {', '.join(PYTHON_RUNTIMES)}")
    if not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be a positive int, got {threads!r}")
    model_path = Path(model_path)
    stored = file_name or model_path.name
    if stored == "model.py":
        raise ConfigError(
            "the model file cannot be called model.py (that name is the Python backend's code)"
        )
    params = {
        "runtime": runtime,
        "model_file": stored,
        "threads": str(threads),
        **(parameters or {}),
    }
    shape = dict(inputs=inputs, outputs=outputs, max_batch_size=max_batch_size)
    serving = dict(dynamic_batching=dynamic_batching, instances=instances, kind=kind)
    cfg = make_config(name, backend="python", parameters=params, **shape, **serving)
    return write_model(repo, cfg, {"model.py": RUNTIME_MODEL_FILE, stored: model_path}, version)


def onnxruntime_backend_model(
    repo: str | Path,
    name: str,
    onnx_path: str | Path,
    *,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    max_batch_size: int = 16,
    dynamic_batching: bool | Mapping[str, Any] = True,
    instances: int = 1,
    tensorrt: str | None = None,
    kind: str = "KIND_GPU",
    version: int = 1,
) -> Path:
    """The NGC image's ``onnxruntime`` backend; ``tensorrt='FP16'`` (or 'FP32', 'INT8') adds TensorRT."""
    accelerators = []
    if tensorrt is not None:
        if tensorrt not in TENSORRT_PRECISIONS:
            raise ConfigError(f"tensorrt precision must be FP32, FP16 or INT8, got {tensorrt!r}")
        if kind != "KIND_GPU":
            raise ConfigError("the TensorRT accelerator runs on GPU instances: use kind='KIND_GPU'")
        accelerators = [
            {"name": "tensorrt", "precision_mode": tensorrt, "max_workspace_size_bytes": 1 << 30}
        ]
    shape = dict(inputs=inputs, outputs=outputs, max_batch_size=max_batch_size)
    serving = dict(dynamic_batching=dynamic_batching, instances=instances, kind=kind)
    gpus = dict(gpus=[0] if kind == "KIND_GPU" else None, gpu_accelerators=accelerators)
    cfg = make_config(name, platform="onnxruntime_onnx", **shape, **serving, **gpus)
    return write_model(repo, cfg, {"model.onnx": onnx_path}, version)


def oneflow_serving_model(
    repo: str | Path,
    name: str,
    saved_graph: str | Path,
    *,
    input_dims: Sequence[int],
    output_dims: Sequence[int],
    max_batch_size: int = 1,
    xrt: str | None = None,
    kind: str = "KIND_GPU",
    instances: int = 1,
    version: int = 1,
) -> Path:
    """The OneFlow-Serving layout: ``backend: "oneflow"``, ``INPUT_0``/``OUTPUT_0``, ``<version>/model/``.

    ``saved_graph`` is the folder ``flow.save(graph, folder)`` wrote; ``xrt`` switches on OneFlow's
    TensorRT (GPU) or OpenVINO (CPU) execution in ``config.pbtxt``. That is the course's alternative:
    case study 1's article changes the server's start command instead (OneFlow-Serving's
    ``--enable-tensorrt`` / ``--enable-openvino``, ignored when a ``config.pbtxt`` exists).
    """
    if xrt not in (None, "tensorrt", "openvino"):
        raise ConfigError(f"xrt must be None, 'tensorrt' or 'openvino', got {xrt!r}")
    if xrt == "tensorrt" and kind != "KIND_GPU":
        raise ConfigError("xrt='tensorrt' needs GPU instances (kind='KIND_GPU')")
    if not (Path(saved_graph) / "model.mlir").is_file():
        raise ConfigError(
            f"{saved_graph} is not a saved OneFlow graph (no model.mlir): write it with flow.save(graph, folder)"
        )
    cfg = make_config(
        name,
        backend="oneflow",
        inputs=[TensorSpec("INPUT_0", tuple(input_dims))],
        outputs=[TensorSpec("OUTPUT_0", tuple(output_dims))],
        max_batch_size=max_batch_size,
        instances=instances,
        kind=kind,
        gpus=[0] if kind == "KIND_GPU" else None,
        parameters={"xrt": xrt} if xrt else None,
    )
    return write_model(repo, cfg, {"model": saved_graph}, version)


def docker_command(
    repo: str | Path,
    *,
    image: str = NGC_IMAGE,
    gpus: bool = True,
    model: str | None = None,
    version: int = 1,
    container_repo: str = "/models",
    server: str = "tritonserver",
) -> str:
    """The ``docker run`` line serving ``repo`` (or only ``model``, mounted at ``/models/<name>/<version>``).

    ``server`` is the server binary inside the image (``/opt/tritonserver/bin/tritonserver`` in
    OneFlow-Serving's image). Documented for readers with Docker and a GPU; not run by the course.
    """
    repo = Path(repo).resolve()
    if model is None:
        mounts = f"-v {repo}:{container_repo}"
    else:
        mounts = (
            f"-v {repo / model / 'config.pbtxt'}:{container_repo}/{model}/config.pbtxt "
            f"-v {repo / model / str(version)}:{container_repo}/{model}/{version}"
        )
    gpu = "--gpus all " if gpus else ""
    return (
        f"docker run --rm {gpu}--shm-size=1g -p 8000:8000 -p 8001:8001 -p 8002:8002 {mounts} \\\n"
        f"    {image} {server} --model-repository={container_repo}"
    )


def tree(repo: str | Path, max_depth: int = 3) -> str:
    """A text listing of a repository (folders first), like ``tree -L 3``."""
    repo = Path(repo)
    lines = [repo.name + "/"]

    def walk(folder: Path, prefix: str, depth: int) -> None:
        entries = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
        shown = entries if depth <= max_depth else []
        for i, entry in enumerate(shown[:12]):
            last = i == len(shown[:12]) - 1 and len(shown) <= 12
            lines.append(
                f"{prefix}{'`-- ' if last else '|-- '}{entry.name}{'/' if entry.is_dir() else ''}"
            )
            if entry.is_dir():
                walk(entry, prefix + ("    " if last else "|   "), depth + 1)
        if len(shown) > 12:
            lines.append(f"{prefix}`-- ... ({len(shown) - 12} more)")

    walk(repo, "", 1)
    return "\n".join(lines)
