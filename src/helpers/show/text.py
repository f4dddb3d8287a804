"""Generated sentences: :func:`say` prints them wrapped to the page, or renders them as Markdown."""

from __future__ import annotations

import textwrap

__all__ = ["say"]


def say(*parts: object, markdown: bool = False) -> None:
    """Print ``parts`` (a list counts as its items) joined by spaces, wrapped to the book's 88
    columns; ``markdown=True`` renders them as Markdown in a notebook (bold verdicts)."""
    flat = [q for p in parts for q in (p if isinstance(p, (list, tuple)) else [p])]
    body = " ".join(str(p) for p in flat if p != "")
    if markdown:
        from IPython import get_ipython  # installed with Jupyter (requirements.txt)
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(body))
            return
    print(textwrap.fill(body, width=88, subsequent_indent="  "))
