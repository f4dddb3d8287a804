"""The book's structure: every notebook is in the table of contents, committed clean, and uses helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IMPORTS_HELPERS = re.compile(
    r"^\s*(?:import\s+helpers\b|from\s+helpers(?:\.\w+)*\s+import\b)", re.MULTILINE
)


def _toc_entries() -> list[str]:
    """Every ``root``/``file`` path of _toc.yml, in order (nested parts, chapters and sections too)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                if isinstance(value, (dict, list)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def _resolve(entry: str) -> Path | None:
    path = ROOT / entry
    candidates = (
        [path]
        if path.suffix in (".md", ".ipynb")
        else [path.with_name(path.name + ext) for ext in (".md", ".ipynb")]
    )
    return next((c for c in candidates if c.is_file()), None)


def _cells(nb_path: Path) -> list[dict]:
    return json.loads(nb_path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_toc_has_entries():
    assert _toc_entries(), "_toc.yml lists no files"


def test_every_toc_entry_exists():
    missing = [e for e in _toc_entries() if _resolve(e) is None]
    assert not missing, f"_toc.yml lists files that do not exist (as .md or .ipynb): {missing}"


def test_every_notebook_is_in_toc():
    listed = {_resolve(e) for e in _toc_entries()}
    absent = [nb.relative_to(ROOT).as_posix() for nb in NOTEBOOKS if nb not in listed]
    assert not absent, f"notebooks missing from _toc.yml: {absent}"


def test_notebooks_are_committed_without_outputs():
    dirty = []
    for nb in NOTEBOOKS:
        for i, cell in enumerate(_cells(nb)):
            if cell.get("cell_type") != "code":
                continue
            if cell.get("outputs") or cell.get("execution_count") is not None:
                dirty.append(f"{nb.name} cell {i}")
    assert not dirty, (
        f"notebooks with stored outputs or execution counts (clear them): {dirty[:10]}"
    )


def test_notebooks_import_helpers():
    lacking = [
        nb.name
        for nb in NOTEBOOKS
        if not any(
            IMPORTS_HELPERS.search(_source(c)) for c in _cells(nb) if c.get("cell_type") == "code"
        )
    ]
    assert not lacking, f"notebooks that do not import helpers: {lacking}"


def test_structure_checks_catch_problems(tmp_path):
    """The checks above really detect a stray output and a missing helpers import."""
    cell = {
        "cell_type": "code",
        "source": ["import torch\n"],
        "outputs": [{"output_type": "stream"}],
        "execution_count": 3,
        "metadata": {},
    }
    assert cell["outputs"] and cell["execution_count"] is not None
    assert not IMPORTS_HELPERS.search(_source(cell))
    for good in (
        "import helpers",
        "from helpers.core.benchmarking import benchmark",
        "  from helpers import ledger",
        "x = 1\nimport helpers.workload.data as d",
    ):
        assert IMPORTS_HELPERS.search(good), good
    assert not IMPORTS_HELPERS.search("# import helpers later\nimport helpersx")
    assert _resolve("book/intro") is not None and _resolve("book/does_not_exist") is None
