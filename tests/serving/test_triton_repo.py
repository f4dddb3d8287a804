"""helpers.serving.triton_repo: Triton model configurations built, written and validated with Triton's own schema."""

# course-test-group: no-oneflow
# (OneFlow-Serving layouts are written from a stand-in saved graph; no OneFlow is imported)

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.serving import triton_repo as sr

IMG = [sr.TensorSpec("image", (3, 8, 8))]
EMB = [sr.TensorSpec("embedding", (4,))]


@pytest.fixture()
def onnx_file(tmp_path) -> Path:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"not really onnx; the repository layout only needs the file")
    return path


@pytest.fixture()
def saved_graph(tmp_path) -> Path:
    folder = tmp_path / "graph" / "model"
    (folder / "model.fc.weight").mkdir(parents=True)
    (folder / "model.mlir").write_text("module {}")
    return folder


def test_tensor_spec_rejects_bad_names_dtypes_and_dims():
    with pytest.raises(sr.ConfigError, match="identifier"):
        sr.TensorSpec("bad name", (3,))
    with pytest.raises(sr.ConfigError, match="dtype"):
        sr.TensorSpec("x", (3,), dtype="FLOAT32")
    with pytest.raises(sr.ConfigError, match="dims"):
        sr.TensorSpec("x", (3, 0))
    assert sr.TensorSpec("x", (-1, 4)).dims == (-1, 4)


def test_make_config_round_trips_through_text():
    cfg = sr.make_config(
        "m",
        backend="python",
        inputs=IMG,
        outputs=EMB,
        max_batch_size=8,
        dynamic_batching={"max_queue_delay_us": 500, "preferred_batch_sizes": [4, 8]},
        parameters={"runtime": "onnxruntime"},
    )
    from google.protobuf import text_format

    text = text_format.MessageToString(cfg)
    back = sr.parse_config(text)
    assert back == cfg
    assert back.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(back.dynamic_batching.preferred_batch_size) == [4, 8]
    assert (
        back.instance_group[0].count == 1
        and back.parameters["runtime"].string_value == "onnxruntime"
    )
    assert 'backend: "python"' in text and "TYPE_FP32" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(backend="python", platform="onnxruntime_onnx"), "exactly one of backend"),
        (dict(), "exactly one of backend"),
        (dict(backend="python", kind="KIND_TPU"), "kind"),
        (dict(backend="python", max_batch_size=-1), "max_batch_size"),
        (dict(backend="python", dynamic_batching=True), "needs max_batch_size >= 1"),
        (
            dict(
                backend="python", max_batch_size=4, dynamic_batching={"preferred_batch_sizes": [8]}
            ),
            "exceed max_batch_size",
        ),
        (
            dict(
                backend="python", max_batch_size=4, dynamic_batching={"preferred_batch_sizes": [0]}
            ),
            "must be positive",  # Triton: "dynamic batching preferred size must be positive"
        ),
        (
            dict(backend="python", max_batch_size=4, dynamic_batching={"delay": 1}),
            "unknown dynamic_batching",
        ),
        (dict(backend="python", parameters={"runtime": "tensorflow"}), "runtime='tensorflow'"),
        (
            dict(platform="onnxruntime_onnx", gpu_accelerators=[{"name": "openvino"}]),
            "accelerators",
        ),
        (dict(backend="oneflow"), "INPUT_0"),
    ],
)
def test_make_config_rejects_what_triton_would(kwargs, message):
    with pytest.raises(sr.ConfigError, match=message):
        sr.make_config("m", inputs=IMG, outputs=EMB, **kwargs)


def test_parse_config_names_the_bad_line():
    with pytest.raises(sr.ConfigError, match="config.pbtxt.*2:1"):
        sr.parse_config('name: "m"\nmax_batch_sise: 4\n')
    with pytest.raises(sr.ConfigError, match="input and one output"):
        sr.check_config(sr.parse_config('name: "m" backend: "python"'))
    with pytest.raises(sr.ConfigError, match="no name"):
        sr.check_config(sr.parse_config('backend: "python"'))
    cpu_with_gpus = 'name: "m" backend: "python" input { name: "x" data_type: TYPE_FP32 dims: 1 } '
    cpu_with_gpus += 'output { name: "y" data_type: TYPE_FP32 dims: 1 } '
    sr.check_config(sr.parse_config(cpu_with_gpus))
    with pytest.raises(sr.ConfigError, match="instances"):
        sr.check_config(sr.parse_config(cpu_with_gpus + "instance_group { count: 0 }"))
    with pytest.raises(sr.ConfigError, match="KIND_CPU instance group cannot list gpus"):
        sr.check_config(
            sr.parse_config(cpu_with_gpus + "instance_group { count: 1 kind: KIND_CPU gpus: 0 }")
        )


def test_python_runtime_model_layout(tmp_path, onnx_file):
    model_dir = sr.python_runtime_model(
        tmp_path / "repo",
        "emb",
        onnx_file,
        runtime="openvino",
        inputs=IMG,
        outputs=EMB,
        max_batch_size=4,
        threads=2,
    )
    assert (model_dir / "1" / "model.py").read_text() == sr.RUNTIME_MODEL_FILE.read_text()
    assert (model_dir / "1" / "m.onnx").read_bytes() == onnx_file.read_bytes()
    cfg = sr.validate_model_dir(model_dir)
    assert (
        cfg.parameters["runtime"].string_value == "openvino"
        and cfg.parameters["threads"].string_value == "2"
    )
    assert cfg.parameters["model_file"].string_value == "m.onnx"
    # the copied model.py is a copy, not a link: editing it must not touch the helper's source
    assert not (model_dir / "1" / "model.py").samefile(sr.RUNTIME_MODEL_FILE)
    with pytest.raises(sr.ConfigError, match="runtime"):
        sr.python_runtime_model(
            tmp_path / "repo", "x", onnx_file, runtime="tvm", inputs=IMG, outputs=EMB
        )
    named_model_py = tmp_path / "model.py"
    named_model_py.write_bytes(onnx_file.read_bytes())
    for path, bad, message in ((onnx_file, 0, "threads"), (named_model_py, 1, "model.py")):
        with pytest.raises(sr.ConfigError, match=message):
            sr.python_runtime_model(
                tmp_path / "repo", "x", path, runtime="openvino", inputs=IMG, outputs=EMB,
                threads=bad,
            )  # fmt: skip
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sr.python_runtime_model(
            tmp_path / "repo",
            "x",
            tmp_path / "missing.onnx",
            runtime="openvino",
            inputs=IMG,
            outputs=EMB,
        )


def _load_written_model(model_dir: Path, monkeypatch) -> object:
    """Instantiate the model.py a repository holds as Triton's Python backend would: its own
    config.pbtxt as JSON, with a stand-in for the stub's ``triton_python_backend_utils``."""
    import importlib.util
    import sys
    import types

    import numpy as np
    from google.protobuf import json_format

    utils = types.ModuleType("triton_python_backend_utils")
    utils.triton_string_to_numpy = lambda name: {"TYPE_FP32": np.float32}[name]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("written_model", model_dir / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = sr.validate_model_dir(model_dir)
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_config": json_format.MessageToJson(cfg, preserving_proto_field_name=True),
            "model_repository": str(model_dir),
            "model_version": "1",
            "model_instance_kind": "CPU",
        }
    )
    return model


def test_the_threads_a_served_model_is_given_reach_its_runtime(tmp_path, torch_mod, monkeypatch):
    """``threads=`` of a Python-backend model, through config.pbtxt and the model.py it runs,
    is what the ONNX Runtime session and the compiled OpenVINO model have (spies on both)."""
    import numpy as np
    import onnxruntime as ort
    import openvino as ov

    from helpers.deploy import export

    net = torch_mod.nn.Sequential(torch_mod.nn.Flatten(), torch_mod.nn.Linear(3 * 8 * 8, 4))
    onnx_path = export.export_onnx(
        net.eval(), torch_mod.zeros(2, 3, 8, 8), tmp_path / "m.onnx"
    ).path
    sessions, compiled = [], []
    real_session, real_compile = ort.InferenceSession, ov.Core.compile_model
    monkeypatch.setattr(
        ort,
        "InferenceSession",
        lambda *a, **k: sessions.append(real_session(*a, **k)) or sessions[-1],
    )
    monkeypatch.setattr(
        ov.Core,
        "compile_model",
        lambda self, *a, **k: compiled.append(real_compile(self, *a, **k)) or compiled[-1],
    )
    x = np.zeros((2, 3, 8, 8), np.float32)
    for threads in (1, 2):
        for runtime in ("onnxruntime", "openvino"):
            model_dir = sr.python_runtime_model(
                tmp_path / f"repo{threads}",
                runtime,
                onnx_path,
                runtime=runtime,
                inputs=IMG,
                outputs=EMB,
                max_batch_size=4,
                threads=threads,
            )
            model = _load_written_model(model_dir, monkeypatch)
            assert model.run(x).shape == (2, 4)
        options = sessions[-1].get_session_options()
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (threads, 1)
        assert compiled[-1].get_property("INFERENCE_NUM_THREADS") == threads
        # and the explicit precision (OpenVINO would pick bf16 on a CPU that has it)
        assert compiled[-1].get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"


def test_production_layouts(tmp_path, onnx_file, saved_graph):
    repo = tmp_path / "prod"
    sr.onnxruntime_backend_model(repo, "ort", onnx_file, inputs=IMG, outputs=EMB)
    sr.onnxruntime_backend_model(
        repo, "ort_trt", onnx_file, inputs=IMG, outputs=EMB, tensorrt="FP16"
    )
    sr.oneflow_serving_model(
        repo, "flow", saved_graph, input_dims=(3, 8, 8), output_dims=(4,), xrt="tensorrt"
    )
    sr.oneflow_serving_model(
        repo,
        "flow_ov",
        saved_graph,
        input_dims=(3, 8, 8),
        output_dims=(4,),
        xrt="openvino",
        kind="KIND_CPU",
    )
    configs = sr.validate_repository(repo)
    assert set(configs) == {"ort", "ort_trt", "flow", "flow_ov"}
    assert (
        configs["ort"].platform == "onnxruntime_onnx"
        and (repo / "ort" / "1" / "model.onnx").is_file()
    )
    acc = configs["ort_trt"].optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "FP16"
    assert configs["flow"].backend == "oneflow" and [t.name for t in configs["flow"].input] == [
        "INPUT_0"
    ]
    assert (repo / "flow" / "1" / "model" / "model.mlir").is_file()
    assert configs["flow_ov"].parameters["xrt"].string_value == "openvino"
    with pytest.raises(sr.ConfigError, match="GPU"):
        sr.onnxruntime_backend_model(
            repo, "x", onnx_file, inputs=IMG, outputs=EMB, tensorrt="FP16", kind="KIND_CPU"
        )
    with pytest.raises(sr.ConfigError, match="precision"):
        sr.onnxruntime_backend_model(repo, "x", onnx_file, inputs=IMG, outputs=EMB, tensorrt="FP8")
    with pytest.raises(sr.ConfigError, match="xrt"):
        sr.oneflow_serving_model(
            repo, "x", saved_graph, input_dims=(3,), output_dims=(4,), xrt="tvm"
        )
    with pytest.raises(sr.ConfigError, match="model.mlir"):
        sr.oneflow_serving_model(repo, "x", tmp_path, input_dims=(3,), output_dims=(4,))


def test_validate_catches_layout_mistakes(tmp_path, onnx_file):
    repo = tmp_path / "repo"
    model_dir = sr.onnxruntime_backend_model(repo, "ort", onnx_file, inputs=IMG, outputs=EMB)
    text = (model_dir / "config.pbtxt").read_text()
    (model_dir / "config.pbtxt").write_text(text.replace('name: "ort"', 'name: "other"'))
    with pytest.raises(sr.ConfigError, match="differs from its folder"):
        sr.validate_repository(repo)
    (model_dir / "config.pbtxt").write_text(text)
    (model_dir / "1" / "model.onnx").unlink()
    with pytest.raises(sr.ConfigError, match="missing model.onnx"):
        sr.validate_repository(repo)
    (model_dir / "1").rmdir()
    with pytest.raises(sr.ConfigError, match="no numeric version"):
        sr.validate_repository(repo)
    (model_dir / "config.pbtxt").unlink()
    with pytest.raises(sr.ConfigError, match="no config.pbtxt"):
        sr.validate_repository(repo)
    with pytest.raises(sr.ConfigError, match="does not exist"):
        sr.validate_repository(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(sr.ConfigError, match="holds no models"):
        sr.validate_repository(tmp_path / "empty")


def test_docker_command_and_tree(tmp_path, onnx_file):
    repo = tmp_path / "prod"
    sr.onnxruntime_backend_model(repo, "ort", onnx_file, inputs=IMG, outputs=EMB)
    cmd = sr.docker_command(repo)
    assert f"-v {repo.resolve()}:/models" in cmd and sr.NGC_IMAGE in cmd and "--gpus all" in cmd
    one = sr.docker_command(
        repo, model="ort", image="img", server="/opt/tritonserver/bin/tritonserver"
    )
    assert f"-v {repo.resolve() / 'ort'}:/models/ort " in one
    assert "img /opt/tritonserver/bin/tritonserver --model-repository=/models" in one
    listing = sr.tree(repo)
    assert (
        listing.splitlines()[0] == "prod/" and "config.pbtxt" in listing and "model.onnx" in listing
    )


def _production_repo(repo: Path, onnx_file: Path, saved_graph: Path) -> dict[str, str]:
    """The four production layouts chapter 9 writes; returns {model: the backend that serves it}."""
    sr.onnxruntime_backend_model(repo, "ort", onnx_file, inputs=IMG, outputs=EMB)
    sr.onnxruntime_backend_model(
        repo, "ort_trt", onnx_file, inputs=IMG, outputs=EMB, tensorrt="FP16"
    )
    io = dict(input_dims=(3, 8, 8), output_dims=(4,))
    sr.oneflow_serving_model(repo, "flow", saved_graph, xrt="tensorrt", **io)
    sr.oneflow_serving_model(repo, "flow_ov", saved_graph, xrt="openvino", kind="KIND_CPU", **io)
    return {"ort": "onnxruntime", "ort_trt": "onnxruntime", "flow": "oneflow", "flow_ov": "oneflow"}


SCHEMA_EDITS = [  # (what, pattern, replacement, phrase of the protobuf parser's error)
    ("unknown field", r"max_batch_size:", "max_batch_sise:", 'no field named "max_batch_sise"'),
    ("text for an int", r"max_batch_size: (\d+)", r'max_batch_size: "\1"', "parse integer"),
    ("float for an int", r"dims: 3\n", "dims: 3.5\n", "parse integer"),
    ("number for a string", r'name: "(\w+)"', "name: 7", "Expected string"),
    ("unknown enum value", r"TYPE_FP32", "TYPE_FLOAT32", "TYPE_FLOAT32"),
    ("unknown nested field", r"count: 1", "instances: 1", 'no field named "instances"'),
]


@pytest.mark.parametrize(
    "what, pattern, replacement, phrase", SCHEMA_EDITS, ids=[e[0] for e in SCHEMA_EDITS]
)
@pytest.mark.parametrize("model", ["ort", "ort_trt", "flow", "flow_ov"])
def test_production_configs_are_checked_with_tritons_schema(
    tmp_path, onnx_file, saved_graph, model, what, pattern, replacement, phrase
):
    """NGC and OneFlow-Serving configs go through Triton's ModelConfig schema, like the Python
    backend's: a hand edit the server's own parser would refuse fails here, naming line and
    column."""
    import re

    repo = tmp_path / "prod"
    _production_repo(repo, onnx_file, saved_graph)
    assert set(sr.validate_repository(repo)) == {"ort", "ort_trt", "flow", "flow_ov"}
    path = repo / model / "config.pbtxt"
    edited, n = re.subn(pattern, replacement, path.read_text(), count=1)
    assert n == 1, f"{what}: pattern not in {model}'s config"
    path.write_text(edited)
    with pytest.raises(sr.ConfigError, match="not a valid Triton model config") as info:
        sr.validate_repository(repo)
    assert f"{model}/config.pbtxt" in str(info.value) and phrase in str(info.value)
    assert re.search(r": \d+:\d+ : ", str(info.value)), "the error names line and column"


def test_backend_rules_catch_hand_edits_of_production_configs(tmp_path, onnx_file, saved_graph):
    """The backend rules (cited in check_config) on hand-edited files, not only on what
    make_config builds."""
    repo = tmp_path / "prod"
    _production_repo(repo, onnx_file, saved_graph)
    for model, old, new, message in [
        ("ort_trt", '"FP16"', '"FP8"', "precision_mode is one of FP32, FP16, INT8, got 'FP8'"),
        ("ort_trt", 'name: "tensorrt"', 'name: "tensorrtx"', "knows accelerators"),
        ("flow", '"INPUT_0"', '"image"', "INPUT_0"),
        ("flow", 'string_value: "tensorrt"', 'string_value: "tvm"', "parameter xrt='tvm'"),
    ]:
        path = repo / model / "config.pbtxt"
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))
        with pytest.raises(sr.ConfigError, match=message):
            sr.validate_model_dir(repo / model)
        path.write_text(text)
    sr.validate_repository(repo)
