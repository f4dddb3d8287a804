"""The package is cut by lifetime, in layers: every import points down, chapter code stays with its chapter.

From the ground up: ``core`` (imports nothing of the package above it), ``measure`` (the instrument
kit), ``show`` and ``record`` (tables, plots; the ledger), ``workload`` (models, data, the task),
``compiling``, ``deploy`` and ``porting``, ``serving``, and last ``chapters`` (one companion module
per chapter that needs one). A module may import its own subpackage and any lower layer; nothing
outside ``chapters`` may import ``helpers.chapters``. Every import counts, the lazy ones inside
functions too. Notebooks and ``tools/`` stand above the package and may import anything.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "helpers"

LAYERS = {
    "core": 0,
    "measure": 1,
    "show": 2,
    "record": 2,
    "workload": 3,
    "compiling": 4,
    "deploy": 4,
    "porting": 4,
    "serving": 5,
    "chapters": 6,
}


def helpers_imports(source: str) -> list[tuple[int, str]]:
    """``(line, helpers.x.y)`` for every import of the package in ``source``, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "helpers":  # from helpers import measure
                found += [(node.lineno, f"helpers.{a.name}") for a in node.names]
            elif node.module.startswith("helpers."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("helpers.")]
    return found


def layer_violations(subpackage: str, source: str) -> list[str]:
    """The imports of a module in ``subpackage`` that point up, sideways, or into ``chapters``."""
    own = LAYERS[subpackage]
    bad = []
    for line, module in helpers_imports(source):
        target = module.split(".")[1]
        if target == subpackage:
            continue
        if target not in LAYERS:
            bad.append(f"line {line}: {module} is in no layer")
        elif target == "chapters":
            bad.append(f"line {line}: {module}: only notebooks and tools import chapter code")
        elif LAYERS[target] >= own:
            bad.append(f"line {line}: {module} ({target}, layer {LAYERS[target]}) from layer {own}")
    return bad


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_subpackage_has_a_layer():
    subs = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert subs == set(LAYERS), (
        f"subpackages without a layer or layers without one: {subs ^ set(LAYERS)}"
    )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_point_down(path):
    rel = path.relative_to(PACKAGE)
    if len(rel.parts) == 1:  # helpers/__init__.py
        assert helpers_imports(path.read_text()) == [], "the package root imports nothing"
        return
    bad = layer_violations(rel.parts[0], path.read_text(encoding="utf-8"))
    assert not bad, f"{rel}: " + "; ".join(bad)


def test_the_layer_check_fails_on_an_upward_import():
    """Planted: ``workload`` importing ``measure`` is fine; importing ``compiling``, lazily, is not."""
    down = "from helpers.measure.timer import benchmark\n"
    up = "def f():\n    from helpers.compiling.graphs import make_inference_graph\n"
    side = "from helpers.deploy import export\n"
    chapter = "from helpers.chapters import ch10_ladder\n"
    assert layer_violations("workload", down) == []
    assert layer_violations("workload", up) == [
        "line 2: helpers.compiling.graphs (compiling, layer 4) from layer 3"
    ]
    assert layer_violations("compiling", side)  # same floor, other subpackage: not allowed
    assert layer_violations("serving", chapter)  # chapter code is for its chapter only
    assert layer_violations("measure", "from helpers import show\n")  # the package-root form


@pytest.mark.parametrize(
    "init",
    sorted(PACKAGE.glob("*/__init__.py")),
    ids=lambda p: p.parent.name,
)
def test_subpackage_index_lists_exactly_its_modules(init):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    listed = set(re.findall(r":mod:`~?helpers\.\w+\.(\w+)`", doc))
    present = {
        p.stem
        for p in init.parent.glob("*.py")
        if p.name != "__init__.py" and not p.stem.startswith("_")
    } - {"process_watchdog"}  # a program the processes module runs, not an API
    assert listed == present, (
        f"{init.parent.name}/__init__.py lists {sorted(listed)}, has {sorted(present)}"
    )


_MARK = re.compile(r"^#\s?@save\s+(helpers(?:\.\w+)+)\s*$", re.M)


def _chapter_code() -> dict[str, str]:
    out = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        out[nb.stem] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return out


def _importers(module: str, code: dict[str, str]) -> set[str]:
    """Chapters that import ``module``, directly or through its subpackage's star re-export."""
    package, name = module.rsplit(".", 1)
    forms = [rf"from {re.escape(package)} import [^\n]*\b{name}\b", rf"{re.escape(module)}\b"]
    init = PACKAGE.parent.joinpath(*package.split(".")) / "__init__.py"
    if f"from {module} import *" in init.read_text():  # from helpers import measure
        parent, sub = package.rsplit(".", 1)
        forms.append(rf"from {re.escape(parent)} import [^\n]*\b{sub}\b")
    pattern = re.compile("|".join(forms))
    return {stem for stem, text in code.items() if pattern.search(text.replace("\n    ", " "))}


def test_saved_cells_go_to_their_chapter_or_to_shared_code():
    """A ``#@save`` target is the chapter's own companion, or a module at least two chapters import."""
    code = _chapter_code()
    problems = []
    for stem, text in code.items():
        for target in set(_MARK.findall(text)):
            if target.startswith("helpers.chapters."):
                if not target.split(".")[-1].startswith(f"ch{stem[:2]}_"):
                    problems.append(f"{stem} saves into another chapter's {target}")
            elif len(_importers(target, code)) < 2:
                problems.append(
                    f"{stem} saves into {target}, which only {_importers(target, code)} use"
                )
    assert not problems, problems
