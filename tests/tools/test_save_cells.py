"""tools/save_cells.py: the page is the one source of every #@save cell, and a drift fails this test."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("save_cells", ROOT / "tools" / "save_cells.py")
save_cells = importlib.util.module_from_spec(spec)
spec.loader.exec_module(save_cells)


def _notebook(path: Path, *sources: str) -> None:
    cells = [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None}
        for s in sources
    ]
    path.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    )


@pytest.fixture
def course(tmp_path):
    (tmp_path / "notebooks").mkdir()
    pkg = tmp_path / "src" / "helpers" / "core"
    pkg.mkdir(parents=True)
    (pkg / "timing.py").write_text('"""Timing."""\n\nimport time\n')
    _notebook(
        tmp_path / "notebooks" / "00_a.ipynb",
        "import time\nx = 1",
        "#@save helpers.core.timing\ndef now():\n    return time.perf_counter()",
        "#@save helpers.core.timing\ndef twice():\n    return 2 * now()",
    )
    return tmp_path


def test_repository_pages_and_package_agree():
    """Every #@save cell in the course's notebooks is exactly what its module holds."""
    assert save_cells.sync(ROOT, check=True) == [], "run: python tools/save_cells.py"


def test_cells_are_copied_in_order_and_check_then_passes(course):
    assert save_cells.sync(course, check=True) == ["helpers.core.timing"]
    assert save_cells.sync(course) == ["helpers.core.timing"]
    text = (course / "src/helpers/core/timing.py").read_text()
    assert text.startswith('"""Timing."""\n\nimport time\n')
    assert text.index("def now") < text.index("def twice")
    assert "#@save" not in text
    assert save_cells.sync(course, check=True) == []
    namespace = {}
    exec(compile(text, "timing.py", "exec"), namespace)  # the saved module runs
    assert namespace["twice"]() > 0


def test_an_edit_on_the_page_makes_the_check_fail(course):
    save_cells.sync(course)
    nb = course / "notebooks" / "00_a.ipynb"
    _notebook(nb, "#@save helpers.core.timing\ndef now():\n    return time.monotonic()")
    assert save_cells.sync(course, check=True) == ["helpers.core.timing"]
    assert save_cells.main(["--check", "--root", str(course)]) == 1


def test_an_edit_in_the_package_makes_the_check_fail(course):
    save_cells.sync(course)
    mod = course / "src/helpers/core/timing.py"
    mod.write_text(mod.read_text().replace("perf_counter()", "perf_counter() * 1"))
    assert save_cells.sync(course, check=True) == ["helpers.core.timing"]


def test_a_removed_cell_removes_its_region(course):
    save_cells.sync(course)
    _notebook(course / "notebooks" / "00_a.ipynb", "x = 1")
    assert save_cells.sync(course) == ["helpers.core.timing"]
    assert "saved from" not in (course / "src/helpers/core/timing.py").read_text()


def test_ruffs_spelling_of_the_mark_is_the_same_mark(course):
    """`ruff format` rewrites "#@save" as "# @save": the cell must still be saved."""
    _notebook(course / "notebooks" / "00_a.ipynb", "# @save helpers.core.timing\nY = 2")
    assert save_cells.sync(course) == ["helpers.core.timing"]
    assert "Y = 2" in (course / "src/helpers/core/timing.py").read_text()


def test_saved_module_is_ruff_formatted(course):
    """A cell that ends with a def: the module gets ruff's blank lines, and --check agrees."""
    _notebook(
        course / "notebooks" / "00_a.ipynb", "#@save helpers.core.timing\ndef f():\n    return 1"
    )
    save_cells.sync(course)
    text = (course / "src/helpers/core/timing.py").read_text()
    assert save_cells.sync(course, check=True) == []
    assert text == save_cells._ruff_format(text, course / "src/helpers/core/timing.py")


def test_bad_marks_are_refused(course):
    _notebook(course / "notebooks" / "01_b.ipynb", "#@save helpers/core/timing.py\nx = 1")
    with pytest.raises(ValueError, match="helpers.<subpackage>.<module>"):
        save_cells.saved_cells(course)
    _notebook(course / "notebooks" / "01_b.ipynb", "#@save helpers.core.nope\nx = 1")
    with pytest.raises(FileNotFoundError, match="no src/helpers/core/nope.py"):
        save_cells.sync(course, check=True)
    _notebook(course / "notebooks" / "01_b.ipynb", "#@save helpers.core.timing\n")
    with pytest.raises(ValueError, match="needs code"):
        save_cells.saved_cells(course)
