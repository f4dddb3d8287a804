"""Results shown: :mod:`~helpers.show.table` (HTML in the book, text in a terminal),
:mod:`~helpers.show.text` (generated sentences) and :mod:`~helpers.show.plots` (figures)."""

from helpers.show.table import *  # noqa: F403
from helpers.show.table import __all__ as _table
from helpers.show.text import *  # noqa: F403
from helpers.show.text import __all__ as _text

__all__ = [*_table, *_text]
