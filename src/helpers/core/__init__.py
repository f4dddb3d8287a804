"""The ground floor: what every chapter and every other subpackage stands on; it imports nothing above it.

- the machine and the mode: ``environment`` (quick/full mode, sizes, devices, seeding, the
  report), ``hardware`` (CPU, flags, GPU: one description), ``machine_needs`` (what full mode
  needs, measured), ``cgroup`` (a container's CPU quota, CPU time, memory limit), ``threads``
- numbers: ``checks`` (argument checks), ``arrays`` (any tensor as float64 NumPy), ``comparison``
  (outputs compared, with controls), ``precision`` (the math mode and its tolerance),
  ``tf32_switch``, ``tf32_emulation``
- OneFlow: ``oneflow_fix`` (its nn.Graph launch race), ``cuda_compat`` (no kernels for Hopper)
- processes: ``processes`` (servers always stopped; ``process_watchdog``), ``worker_pool``,
  ``subprocess_run`` (a fresh Python with its own environment), ``scratch`` (temporary folders),
  ``process_memory`` (a process tree's peak memory)
"""
