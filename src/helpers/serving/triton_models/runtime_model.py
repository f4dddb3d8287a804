"""A Triton Python-backend model: an exported network served with ONNX Runtime or OpenVINO.

Standalone code: the Python-backend stub runs this file as ``<repo>/<model>/<version>/model.py``
(:mod:`helpers.serving.triton_repo` copies it there); it needs only NumPy, the stub's
``triton_python_backend_utils`` and the runtime it serves. ``config.pbtxt`` names one input and
one output and sets ``parameters``: ``runtime`` (``onnxruntime`` or ``openvino``), ``model_file``
(in the version folder), ``threads`` (intra-op threads of one instance, default 1) and
``precision`` (OpenVINO: ``f32`` by default, explicit so results reproduce; or ``bf16``/``f16``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

__all__ = ["TritonPythonModel"]

Runner = Callable[[np.ndarray], np.ndarray]


def _onnxruntime(path: str, params: dict[str, str], kind: str, device_id: int) -> Runner:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(params.get("threads", "1"))
    opts.inter_op_num_threads = 1
    providers: list[Any] = ["CPUExecutionProvider"]
    if kind == "GPU" and "CUDAExecutionProvider" in ort.get_available_providers():
        if hasattr(ort, "preload_dlls"):  # CUDA/cuDNN from the pip packages (onnxruntime >= 1.21)
            ort.preload_dlls()
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": device_id}))
    session = ort.InferenceSession(path, opts, providers=providers)
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]


def _openvino(path: str, params: dict[str, str], kind: str, device_id: int) -> Runner:
    import openvino as ov

    core = ov.Core()
    device = "GPU" if kind == "GPU" and "GPU" in core.available_devices else "CPU"
    config = {"INFERENCE_PRECISION_HINT": params.get("precision", "f32")}
    config["INFERENCE_NUM_THREADS"] = int(params.get("threads", "1"))
    compiled = core.compile_model(path, device, config)
    request = compiled.create_infer_request()
    output = compiled.output(0)
    # The request reuses its output buffer: copy before the next call overwrites it.
    return lambda x: np.array(request.infer({0: x})[output], copy=True)


RUNTIMES = {"onnxruntime": _onnxruntime, "openvino": _openvino}


class TritonPythonModel:
    """The class the Python backend instantiates once per model instance."""

    def initialize(self, args: dict[str, str]) -> None:
        """Called once when the instance loads: read config.pbtxt, open the model file."""
        config = json.loads(args["model_config"])  # config.pbtxt, as JSON
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        runtime = params.get("runtime", "onnxruntime")
        if runtime not in RUNTIMES:
            raise ValueError(f"parameter runtime={runtime!r} is not one of {sorted(RUNTIMES)}")
        if len(config["input"]) != 1 or len(config["output"]) != 1:
            raise ValueError("this model serves networks with exactly one input and one output")
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.output_dtype = pb_utils.triton_string_to_numpy(config["output"][0]["data_type"])
        self.batched = int(config.get("max_batch_size", 0)) > 0  # inputs have a batch axis
        self.runtime = runtime
        path = os.path.join(
            args["model_repository"], args["model_version"], params.get("model_file", "model.onnx")
        )
        if not os.path.exists(path):
            raise FileNotFoundError(f"model file {path} does not exist")
        self.run = RUNTIMES[runtime](  # a function: NumPy batch in, NumPy batch out
            path,
            params,
            args.get("model_instance_kind", "CPU"),  # CPU or GPU, from instance_group
            int(args.get("model_instance_device_id", "0") or 0),
        )

    def _response(self, output: np.ndarray) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(self.output_name, output.astype(self.output_dtype))]
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        """Called for every batch of requests the scheduler hands over: one response per request."""
        arrays = [
            pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests
        ]
        try:
            if not self.batched:  # no batch axis: every request runs on its own
                return [
                    self._response(self.run(np.ascontiguousarray(a, dtype=np.float32)))
                    for a in arrays
                ]
            # Dynamic batching: Triton hands over several requests, the Python backend does not
            # merge them. Concatenate along the batch axis and run the network ONCE for all.
            batch = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
            out = self.run(np.ascontiguousarray(batch, dtype=np.float32))
        except Exception as exc:  # each request gets the error, the stub lives on
            error = pb_utils.TritonError(
                f"{self.runtime} failed on input of shape {arrays[0].shape}: {exc}"
            )
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        # Split the batched answer back into one response per request, in request order.
        splits = np.cumsum([len(a) for a in arrays])[:-1]
        return [self._response(part) for part in np.split(out, splits)]

    def finalize(self) -> None:
        """Called once when the instance unloads."""
        self.run = None
