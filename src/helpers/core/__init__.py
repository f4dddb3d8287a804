"""The ground floor: what every chapter and every other subpackage stands on; it imports nothing above it.

- the machine and the mode: ``environment`` (mode, sizes, devices, seeding, the report),
  ``hardware``, ``machine_needs``, ``cgroup``, ``threads``, ``cuda_compat``
- checks and numbers: ``checks``, ``arrays``, ``comparison``, ``precision``, ``tf32``
- processes: ``processes`` (servers always stopped), ``process_watchdog``, ``worker_pool``,
  ``subprocess_run``, ``process_memory``, ``scratch``, ``oneflow_fix`` (OneFlow's launch race)
"""
