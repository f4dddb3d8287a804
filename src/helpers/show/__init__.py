"""Results shown: tables that render as HTML in the book and as text in a terminal, and plots.

- :mod:`~helpers.show.table` -- :class:`~helpers.show.table.Table`, and tables of measurements
- :mod:`~helpers.show.plots` -- the course's matplotlib figures
- :mod:`~helpers.show.text` -- generated sentences, rendered as Markdown in a notebook

``from helpers.show import Table, compare_table, say``; ``from helpers.show import plots``.
"""

from helpers.show.table import *  # noqa: F403
from helpers.show.table import __all__ as _table
from helpers.show.text import *  # noqa: F403
from helpers.show.text import __all__ as _text

__all__ = [*_table, *_text]
