"""Shared helpers for the course "From PyTorch to production, fast".

The package holds plumbing and what several chapters reuse; the technique each chapter teaches is written
on its page. It is cut by how long its code lives, in layers that only import downwards (a test walks every
import):

- :mod:`helpers.core` -- mode, sizes, devices, threads, comparison, precision policy, managed processes
- :mod:`helpers.measure` -- the instrument kit: timer, Measurement, machine load, profiling, roofline
- :mod:`helpers.show` -- tables that render as HTML in the book and text in a terminal; plots
- :mod:`helpers.record` -- the results ledger, its record names, the case studies' figures
- :mod:`helpers.workload` -- models, generated data, training recipe, the team's model, the saliency task
- :mod:`helpers.compiling` -- static graphs and op counts (chapters 3-10)
- :mod:`helpers.porting` -- PyTorch -> OneFlow migration (chapters 1-3)
- :mod:`helpers.deploy` -- ONNX export, ONNX Runtime / OpenVINO runners, INT8 quantization (chapters 7-10)
- :mod:`helpers.serving` -- a real Triton server, repositories, clients, load runs, the nginx front (chapters 9-10)
- :mod:`helpers.chapters` -- one companion module per chapter that needs one; nothing else imports them

Code first written on a chapter's page and reused elsewhere is copied here by ``tools/save_cells.py``
(cells that start with ``#@save``); a test fails when a page and the package differ.
``import helpers`` and its subpackages import no framework; a module whose saved page code subclasses a
framework class (``compiling.graphs``, ``workload.saliency``) imports that framework when it is imported.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fast-inference-course-helpers")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
