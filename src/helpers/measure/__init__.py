"""The instrument kit every chapter measures with, one idea per module (like ``torch.utils.benchmark``).

``from helpers import measure`` gives the names of :mod:`~helpers.measure.timer` (the timing loop,
interleaved rounds), :mod:`~helpers.measure.measurement` (a Measurement, paired ratios) and
:mod:`~helpers.measure.machine` (the machine's load); import profiling, roofline, batch_sweep
and ladder as modules.
"""

from helpers.measure.machine import *  # noqa: F403
from helpers.measure.machine import __all__ as _machine
from helpers.measure.measurement import *  # noqa: F403
from helpers.measure.measurement import __all__ as _measurement
from helpers.measure.timer import *  # noqa: F403
from helpers.measure.timer import __all__ as _timer

__all__ = [*_timer, *_measurement, *_machine]
