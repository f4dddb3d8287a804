"""Cell numbers in the book's pages, generated from the notebooks, so that none goes stale.

A page that points at a notebook cell writes its number (nbformat's index, counting every cell
from 0, as JupyterLab's cell order does) followed by a marker naming the notebook and the cell's
id (every cell has a unique one, ``tests/course/test_course_structure.py``), or two ids for a range:

    the ladder table and waterfall (cells 40-41<!--cell 10_capstone:a10b0010..a10c0013-->)

The marker is an HTML comment: the rendered page shows the number only. When cells are inserted
or removed, ``write`` renumbers every reference from the ids; ``check`` (run by
``tests/tools/test_cell_refs.py``) fails on a number that differs from its cell's place, on a marker
whose notebook or cell no longer exists, and on a "cell N" in a page without a marker.

    python tools/cell_refs.py check    # exit 1 on a stale, broken or unmarked reference
    python tools/cell_refs.py write    # renumber every reference from the notebooks
    python tools/cell_refs.py show     # each reference with its cell's first line, for review
"""

from __future__ import annotations

import argparse
import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("book/workshop.md", "book/zh/index.md")
REF = re.compile(
    r"(?P<num>\d+(?:-\d+)?)<!--cell (?P<nb>[\w-]+):(?P<a>[\w-]+)(?:\.\.(?P<b>[\w-]+))?-->"
)
# "cell 12" / "cells 3-5" / "单元格 7" not followed by a marker (a typed number)
UNMARKED = re.compile(r"(?<!<!--)(?:\b[Cc]ells? |单元格 ?)(\d+(?:-\d+)?)(?![\d-]|<!--cell )")

__all__ = ["Ref", "cell_ids", "refs", "render", "unmarked", "check", "write", "main"]


@dataclass(frozen=True)
class Ref:
    """One reference: where it is, what it says, what the notebook says now."""

    page: str
    line: int
    written: str
    notebook: str
    ids: tuple[str, ...]
    now: str | None  # the number the notebook gives; None when the marker is broken
    problem: str = ""


def cell_ids(notebook: str, root: Path = ROOT) -> dict[str, int]:
    """{cell id: its index} of ``notebooks/<notebook>.ipynb``."""
    path = root / "notebooks" / f"{notebook}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return {c["id"]: i for i, c in enumerate(cells)}


def _number(ids: tuple[str, ...], index: dict[str, int]) -> tuple[str | None, str]:
    missing = [i for i in ids if i not in index]
    if missing:
        return None, f"no cell with id {', '.join(missing)}"
    first, last = (index[i] for i in (ids[0], ids[-1]))
    if last < first:
        return None, f"the range runs backwards ({first}..{last})"
    return (str(first) if first == last else f"{first}-{last}"), ""


def _now(m: re.Match[str], cache: dict[str, Any], root: Path) -> tuple[str | None, str]:
    """The number a marker's notebook gives now, or None and why not."""
    nb = m.group("nb")
    if nb not in cache:
        path = root / "notebooks" / f"{nb}.ipynb"
        cache[nb] = cell_ids(nb, root) if path.exists() else None
    if cache[nb] is None:
        return None, f"no notebook {nb}"
    return _number(tuple(x for x in (m.group("a"), m.group("b")) if x), cache[nb])


def refs(text: str, page: str = "", root: Path = ROOT) -> list[Ref]:
    """Every marked reference in ``text``, with the number its notebook gives now."""
    found, cache = [], {}
    for m in REF.finditer(text):
        ids = tuple(x for x in (m.group("a"), m.group("b")) if x)
        line = text.count("\n", 0, m.start()) + 1
        found.append(Ref(page, line, m.group("num"), m.group("nb"), ids, *_now(m, cache, root)))
    return found


def render(text: str, root: Path = ROOT) -> str:
    """``text`` with every marked number replaced by what its notebook gives now (broken markers
    are left as they are: :func:`refs` reports them)."""
    cache: dict[str, Any] = {}

    def sub(m: re.Match[str]) -> str:
        now = _now(m, cache, root)[0]
        return m.group(0) if now is None else now + m.group(0)[len(m.group("num")) :]

    return REF.sub(sub, text)


def unmarked(text: str) -> list[tuple[int, str]]:
    """(line, text) of every "cell N" without a marker."""
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(0).strip()) for m in UNMARKED.finditer(text)
    ]


def check(pages: tuple[str, ...] = PAGES, root: Path = ROOT) -> list[str]:
    """One line per stale number, broken marker or unmarked reference; empty when all hold."""
    problems = []
    for page in pages:
        text = (root / page).read_text(encoding="utf-8")
        for r in refs(text, page, root):
            if r.problem:
                problems.append(f"{page}:{r.line}: {r.notebook}: {r.problem}")
            elif r.now != r.written:
                problems.append(
                    f"{page}:{r.line}: {r.notebook} cell {r.written} is now {r.now} "
                    "(python tools/cell_refs.py write)"
                )
        problems += [f"{page}:{n}: '{t}' has no cell marker" for n, t in unmarked(text)]
    return problems


def write(pages: tuple[str, ...] = PAGES, root: Path = ROOT) -> list[str]:
    """Renumber every page's references; the pages that changed."""
    changed = []
    for page in pages:
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = render(text, root)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def _show(pages: tuple[str, ...], root: Path) -> None:
    for page in pages:
        text = (root / page).read_text(encoding="utf-8")
        for r in refs(text, page, root):
            cells = json.loads((root / "notebooks" / f"{r.notebook}.ipynb").read_text())["cells"]
            index = cell_ids(r.notebook, root)
            heads = [
                "".join(cells[index[i]]["source"]).splitlines()[0][:70] if i in index else "?"
                for i in r.ids
            ]
            print(f"{page}:{r.line} {r.notebook} {r.written}: " + " .. ".join(heads))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cmd", choices=("check", "write", "show"))
    args = parser.parse_args(argv)
    if args.cmd == "write":
        print("renumbered:", ", ".join(write()) or "nothing")
    elif args.cmd == "show":
        _show(PAGES, ROOT)
    problems = check()
    for p in problems:
        print(p)
    if args.cmd == "check" and not problems:
        print("cell_refs: every cell reference matches its notebook")
    return 1 if problems else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `show | head` ends quietly
    raise SystemExit(main())
