"""Deployment formats and runtimes (case study 2, chapters 7-10).

- :mod:`~helpers.deploy.export` -- ONNX export and verification (saved from chapter 7's page), op counts
- :mod:`~helpers.deploy.runner` -- :class:`~helpers.deploy.runner.Runner`, any runtime's model run and timed alike
- :mod:`~helpers.deploy.runtimes` -- ONNX Runtime sessions and OpenVINO models, opened as Runners
- :mod:`~helpers.deploy.aoti` -- AOTInductor: ``torch.export`` + one compiled ``.pt2`` file, and running it in a fresh process (saved from chapter 7's page)
- :mod:`~helpers.deploy.quantization` -- INT8 post-training static quantization (saved from chapter 8's page)
"""
