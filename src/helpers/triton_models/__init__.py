"""Model files that Triton's Python backend runs (copied as ``<repo>/<model>/<version>/model.py``).

Each module here is standalone code executed by the server's Python-backend stub, not imported
by the notebooks: it may only use ``triton_python_backend_utils`` (provided by the stub), NumPy
and the runtime it serves. :mod:`helpers.serving_repo` copies them into model repositories.

- ``onnxruntime_model.py`` -- ONNX Runtime on ``model.onnx`` (FP32 or INT8) in the version folder
- ``openvino_model.py`` -- OpenVINO compiling the same ONNX file
- ``oneflow_model.py`` -- a OneFlow ``nn.Graph`` rebuilt from the ``model/`` folder ``flow.save(graph)`` wrote
"""
