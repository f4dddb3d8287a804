"""The ground floor: what every chapter and every other subpackage stands on; it imports nothing above it.

- :mod:`~helpers.core.environment` -- quick/full mode, sizes, devices, seeding, environment report
- :mod:`~helpers.core.hardware` -- what this machine is (CPU, flags, GPU), in one shape and one description
- :mod:`~helpers.core.machine_needs` -- what full mode needs of a machine (measured), and whether it fits
- :mod:`~helpers.core.cgroup` -- a container's CPU quota, CPU time and memory limit, from its cgroup
- :mod:`~helpers.core.threads` -- the same CPU threads for every framework of a comparison
- :mod:`~helpers.core.checks` -- argument checks with one wording
- :mod:`~helpers.core.cuda_compat` -- which CUDA architectures a library's kernels were built for (OneFlow on Hopper)
- :mod:`~helpers.core.arrays` -- any framework's tensor as a float64 NumPy array
- :mod:`~helpers.core.comparison` -- elementwise and task-level comparison of outputs, with controls
- :mod:`~helpers.core.precision` -- the math mode in effect (fp32, TF32, bf16, fp16, int8) and the tolerance it implies
- :mod:`~helpers.core.tf32` -- TF32 switched off in PyTorch and OneFlow and put back, and emulated on a CPU
- :mod:`~helpers.core.oneflow_fix` -- a fix for OneFlow 0.9.0's nn.Graph launch race, loaded before OneFlow
- :mod:`~helpers.core.process_memory` -- the peak memory of a process tree, sampled in a thread
- :mod:`~helpers.core.processes` -- child processes (servers, proxies) that are always stopped
- :mod:`~helpers.core.worker_pool` -- worker processes reporting on one queue, with timeouts
- :mod:`~helpers.core.scratch` -- temporary folders removed when the process that made them exits
- :mod:`~helpers.core.subprocess_run` -- run a function in a fresh Python process with its own environment
"""
