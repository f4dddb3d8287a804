"""Copy the notebook cells marked ``#@save`` into the ``helpers`` package (Dive into Deep Learning's idea).

A chapter writes its technique as code on the page. When another chapter (or the package) reuses that code,
the cell's first line says where it belongs::

    #@save helpers.compiling.graphs
    class InferenceGraph(flow.nn.Graph):
        ...

This tool copies every such cell, in notebook order, into a marked region of that module::

    # ---- saved from notebooks/03_dynamic_to_static.ipynb by tools/save_cells.py: edit it there ----
    class InferenceGraph(flow.nn.Graph):
        ...
    # ---- end of cells saved from notebooks/03_dynamic_to_static.ipynb ----

so the page is the one source and the package can never drift from it. The module keeps its own imports
above the region. ``--check`` changes nothing and exits 1 naming every module that differs from its pages
(``tests/tools/test_save_cells.py`` runs it).

Usage: python tools/save_cells.py [--check] [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

__all__ = ["SAVE_MARK", "saved_cells", "render_module", "sync", "main"]

SAVE_MARK = "#@save"
# `ruff format` writes the mark as "# @save"; both spellings are the same mark.
_MARK_RE = re.compile(r"^#\s?@save\s+(helpers(?:\.\w+)+)\s*$")
_MARK_START = re.compile(r"^#\s?@save\b")


BEGIN = "# ---- saved from {} by tools/save_cells.py: edit it there ----"
END = "# ---- end of cells saved from {} ----"


def saved_cells(root: Path) -> dict[str, dict[str, list[str]]]:
    """``{module: {notebook: [cell code without its #@save line, ...]}}`` for every notebook under ``root``."""
    out: dict[str, dict[str, list[str]]] = {}
    for nb_path in sorted((root / "notebooks").glob("*.ipynb")):
        rel = nb_path.relative_to(root).as_posix()
        cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            first, _, body = source.partition("\n")
            if not _MARK_START.match(first):
                continue
            match = _MARK_RE.match(first.strip())
            if not match:
                raise ValueError(
                    f"{rel} cell {index}: write '#@save helpers.<subpackage>.<module>', got {first!r}"
                )
            if not body.strip():
                raise ValueError(
                    f"{rel} cell {index}: a #@save cell needs code below its first line"
                )
            out.setdefault(match.group(1), {}).setdefault(rel, []).append(body.strip("\n"))
    return out


def module_path(root: Path, module: str) -> Path:
    """The file of ``module`` (``helpers.a.b`` -> ``src/helpers/a/b.py``); it must exist."""
    path = root / "src" / Path(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise FileNotFoundError(f"#@save names {module}, but there is no {path.relative_to(root)}")
    return path


def render_module(text: str, regions: dict[str, list[str]]) -> str:
    """``text`` with each notebook's region replaced by its cells (appended at the end when new);
    the regions of notebooks that no longer save anything into this module removed."""
    for notebook in re.findall(r"^# ---- saved from (\S+) by tools/save_cells\.py", text, re.M):
        if notebook not in regions:
            text = _replace_region(text, notebook, None)
    for notebook, cells in regions.items():
        text = _replace_region(text, notebook, "\n\n\n".join(cells))
    return text


def _replace_region(text: str, notebook: str, body: str | None) -> str:
    begin, end = BEGIN.format(notebook), END.format(notebook)
    block = "" if body is None else f"{begin}\n{body}\n{end}\n"
    if begin in text:
        start = text.index(begin)
        stop = text.find(end, start)
        if stop < 0:
            raise ValueError(f"the region saved from {notebook} has no end line ({end!r})")
        stop = text.index("\n", stop) + 1 if "\n" in text[stop:] else len(text)
        return text[:start] + block + text[stop:]
    if body is None:
        return text
    return text.rstrip("\n") + "\n\n\n" + block


def _ruff_format(text: str, path: Path) -> str:
    """``text`` as ``ruff format`` writes ``path``: the module stays ruff-clean after the copy (a
    cell ending in a ``def`` gets two blank lines before the region's end), and ``--check`` compares
    the same text. Ruff is required, or the check would depend on the machine."""
    import shutil
    import subprocess

    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        raise RuntimeError("ruff is not installed: make setup installs it (the check needs it)")
    out = subprocess.run(
        [ruff, "format", "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=path.parent,
    )
    if out.returncode != 0:
        raise RuntimeError(f"ruff format could not format {path}: {out.stderr.strip()}")
    return out.stdout


def sync(root: Path, check: bool = False) -> list[str]:
    """Write (or, with ``check``, only compare) every module with saved cells; return the modules that differ."""
    differ = []
    wanted = saved_cells(root)
    # modules that hold a region but no longer receive any cell
    for path in sorted((root / "src" / "helpers").rglob("*.py")):
        module = ".".join(path.relative_to(root / "src").with_suffix("").parts)
        if module not in wanted and "by tools/save_cells.py" in path.read_text(encoding="utf-8"):
            wanted[module] = {}
    for module, regions in sorted(wanted.items()):
        path = module_path(root, module)
        old = path.read_text(encoding="utf-8")
        new = _ruff_format(render_module(old, regions), path)
        if new != old:
            differ.append(module)
            if not check:
                path.write_text(new, encoding="utf-8")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a module differs"
    )
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    differ = sync(args.root, check=args.check)
    for module in differ:
        verb = "differs from its page(s)" if args.check else "updated from its page(s)"
        print(f"{module}: {verb}")
    if args.check and differ:
        print("run: python tools/save_cells.py  (the notebooks are the source of #@save code)")
        return 1
    if not differ:
        print("save_cells: every #@save cell matches its module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
