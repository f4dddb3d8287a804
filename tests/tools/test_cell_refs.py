"""tools/cell_refs.py: the book's cell numbers are generated from the notebooks' cell ids, and a
stale, broken or unmarked one fails here."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("cell_refs", ROOT / "tools" / "cell_refs.py")
cell_refs = importlib.util.module_from_spec(_spec)
sys.modules["cell_refs"] = cell_refs  # dataclasses look their module up by name
_spec.loader.exec_module(cell_refs)


def test_every_cell_reference_in_the_book_matches_its_notebook():
    problems = cell_refs.check()
    assert not problems, "\n".join(problems) + "\nrun: python tools/cell_refs.py write"
    # the facilitator notes point at cells of every chapter, all through markers
    text = (ROOT / "book" / "workshop.md").read_text()
    marked = {r.notebook for r in cell_refs.refs(text)}
    assert len(cell_refs.refs(text)) >= 60 and len(marked) >= 12


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "10_capstone.ipynb", tmp_path / "notebooks")
    return tmp_path


def test_a_cell_inserted_above_makes_the_number_stale(tmp_path):
    root = _tree(tmp_path)
    ids = list(cell_refs.cell_ids("10_capstone", root))
    page = root / "page.md"
    page.write_text(f"the ladder (cells 40-41<!--cell 10_capstone:{ids[40]}..{ids[41]}-->).\n")
    assert cell_refs.check(("page.md",), root) == []
    nb = root / "notebooks" / "10_capstone.ipynb"
    data = json.loads(nb.read_text())
    data["cells"].insert(
        1, {"cell_type": "markdown", "id": "new-one", "metadata": {}, "source": []}
    )
    nb.write_text(json.dumps(data))
    (problem,) = cell_refs.check(("page.md",), root)
    assert "cell 40-41 is now 41-42" in problem
    assert cell_refs.write(("page.md",), root) == ["page.md"]
    assert "cells 41-42<!--cell" in page.read_text() and cell_refs.check(("page.md",), root) == []


def test_broken_and_unmarked_references_are_errors(tmp_path):
    root = _tree(tmp_path)
    page = root / "page.md"
    page.write_text(
        "cell 3<!--cell 10_capstone:gone-->, cell 4<!--cell 99_missing:x-->, and cell 7 typed.\n"
    )
    problems = cell_refs.check(("page.md",), root)
    assert any("no cell with id gone" in p for p in problems)
    assert any("no notebook 99_missing" in p for p in problems)
    assert any("'cell 7' has no cell marker" in p for p in problems)
    assert len(problems) == 3
