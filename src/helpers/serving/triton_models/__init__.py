"""Standalone model files Triton's Python-backend stub runs (not imported by the notebooks).

``runtime_model.py``: one exported network in ONNX Runtime or OpenVINO, copied as
``<repo>/<model>/<version>/model.py`` by :func:`helpers.serving.triton_repo.python_runtime_model`.
"""
