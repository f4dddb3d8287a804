"""Results shown: :class:`~helpers.show.table.Table` (HTML in the book, text in a terminal),
generated sentences (:func:`~helpers.show.text.say`) and :mod:`~helpers.show.plots`."""

from helpers.show.table import *  # noqa: F403
from helpers.show.table import __all__ as _table
from helpers.show.text import *  # noqa: F403
from helpers.show.text import __all__ as _text

__all__ = [*_table, *_text]
