"""Model files that Triton's Python backend runs (copied as ``<repo>/<model>/<version>/model.py``).

The modules here are standalone code executed by the server's Python-backend stub, not imported by
the notebooks: they use only ``triton_python_backend_utils`` (provided by the stub), NumPy and the
runtime they serve. :func:`helpers.serving.triton_repo.python_runtime_model` copies them into repositories.

- ``runtime_model.py`` -- serves one exported network with ONNX Runtime (``model.onnx``, FP32 or
  INT8), OpenVINO (the same ONNX file) or OneFlow (an ``nn.Graph`` rebuilt from the ``model/``
  folder that ``flow.save(graph, ...)`` wrote), batching the requests Triton hands it.
"""
