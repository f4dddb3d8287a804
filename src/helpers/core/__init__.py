"""The measurement core every chapter uses: mode and devices, timing, numerical comparison, ledger, plots.

- :mod:`~helpers.core.environment` -- quick/full mode, devices, seeding, environment report
- :mod:`~helpers.core.cuda_compat` -- which CUDA architectures a library's kernels were built for (OneFlow on Hopper)
- :mod:`~helpers.core.benchmarking` -- honest timing (warm-up, synchronisation, percentiles), interleaved rounds
- :mod:`~helpers.core.comparison` -- numerical comparison of outputs across frameworks
- :mod:`~helpers.core.precision` -- the math mode in effect (fp32, TF32, bf16, fp16, int8) and the tolerance it implies
- :mod:`~helpers.core.ledger` -- the results ledger (JSON records of measurements)
- :mod:`~helpers.core.reported` -- the case studies' published figures
- :mod:`~helpers.core.plots` -- the course's matplotlib figures
- :mod:`~helpers.core.scratch` -- temporary folders removed when the process that made them exits
- :mod:`~helpers.core.subprocess_run` -- run a function in a fresh Python process with its own environment
"""
