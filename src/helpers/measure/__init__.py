"""The instrument kit every chapter measures with, one idea per module (like ``torch.utils.benchmark``).

- :mod:`~helpers.measure.timer` -- the timing loop (written on chapter 0's page), interleaved rounds
- :mod:`~helpers.measure.measurement` -- a Measurement (median first, spread, where it ran), paired ratios
- :mod:`~helpers.measure.machine` -- the machine's load while timing, and the one "contended" rule
- :mod:`~helpers.measure.profiling` -- PyTorch profiler tables, peak tensor memory
- :mod:`~helpers.measure.roofline` -- this machine's compute ceilings and a model's FLOPs
- :mod:`~helpers.measure.batch_sweep` -- batch-size sweeps, thread counts, GPU utilisation
- :mod:`~helpers.measure.ladder` -- a speed-up ladder: each rung timed on the last kept path (ch. 10)

``from helpers import measure`` gives the names of the first three; import the others as modules.
"""

from helpers.measure.machine import *  # noqa: F403
from helpers.measure.machine import __all__ as _machine
from helpers.measure.measurement import *  # noqa: F403
from helpers.measure.measurement import __all__ as _measurement
from helpers.measure.timer import *  # noqa: F403
from helpers.measure.timer import __all__ as _timer

__all__ = [*_timer, *_measurement, *_machine]
