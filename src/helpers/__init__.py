"""Shared helpers for the course "From PyTorch to production, fast".

The package holds plumbing and what several chapters reuse; the technique each chapter teaches is written
on its page. Subpackages follow the course's architecture:

- :mod:`helpers.core` -- mode and devices, honest timing, numerical comparison, ledger, plots, scratch folders
- :mod:`helpers.workload` -- models, generated data, training recipe, the team's model, the saliency task
- :mod:`helpers.porting` -- PyTorch -> OneFlow migration and precision alignment (chapters 1-2)
- :mod:`helpers.compiling` -- static graphs, op counts, graph switches (chapters 3-6)
- :mod:`helpers.perf` -- profiling, roofline, batch sweeps, pipelines, the capstone ladder
- :mod:`helpers.deploy` -- ONNX export, ONNX Runtime / OpenVINO runners, INT8 quantization (chapters 7-8)
- :mod:`helpers.serving` -- a real Triton server, its repositories, clients and load runs (chapter 9)

Code first written on a chapter's page and reused elsewhere is copied here by ``tools/save_cells.py``
(cells that start with ``#@save``); a test fails when a page and the package differ.
``import helpers`` and its subpackages import no framework; a module whose saved page code subclasses a
framework class (``compiling.graphs``, ``workload.saliency``) imports that framework when it is imported.
"""

__version__ = "0.2.0"
