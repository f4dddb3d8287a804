"""pytest wiring for the course: nbval's executed notebooks feed the book's execution cache.

`make test` executes every notebook once, with nbval. As each notebook finishes with all its
cells passing, the outputs nbval collected are stored in Jupyter Book's execution cache
(`_build/.jupyter_cache`), so the book build that follows (`tests/book/`, and `make book`)
renders those outputs instead of executing the notebooks a second time.

Jupyter Book keys its cache on the code cells only, so each mode has its own cache folder
(`_build/.jupyter_cache/quick`, `.../full`): a book built in one mode never shows outputs
executed in the other. A run with `COURSE_FEWEST=1` (`make fullcpu`: the fewest repeats) never
feeds the cache, and its times go to `_build/nbval_times/<mode>-fewest.json`.

`COURSE_NBVAL_OUTPUTS=dir` also writes each executed notebook, with the outputs nbval
collected (passed or not), to `dir/<name>.ipynb` (`tools/full_cpu_run.py` reads its skip lines).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent


def _cache_dir() -> Path:
    """The execution cache of the current mode (tools/book_config.py points the book at the same one)."""
    from helpers.core.environment import get_mode

    return ROOT / "_build" / ".jupyter_cache" / get_mode()


_runs: dict[str, dict[str, Any]] = {}
_starts: dict[str, float] = {}


_peak: Any = None  # helpers.core.process_memory.TreeMemory of the running notebook


def _record_time(path: Path, seconds: float, ok: bool) -> None:
    """Append the notebook's wall time and peak memory under nbval to
    ``_build/nbval_times/<mode>.json``.

    ``tools/chapter_times.py`` turns a quiet run's times into each chapter's "Time" line.
    """
    import json

    from helpers.core.environment import fewest, get_mode

    global _peak
    tree = largest = 0
    summed = "rss"
    if _peak is not None:
        _peak.stop()
        tree, largest = round(_peak.peak_children / 2**20), round(_peak.largest / 2**20)
        summed = "pss" if _peak.pss else "rss"  # what the tree's figure sums
        _peak = None
    name = get_mode() + ("-fewest" if fewest() else "")
    out = ROOT / "_build" / "nbval_times" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(out.read_text()) if out.exists() else []
    runs.append(
        {
            "notebook": path.stem,
            "seconds": round(seconds, 1),
            "passed": ok,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "loadavg": os.getloadavg()[0],
            "peak_tree_mb": tree,
            "peak_process_mb": largest,
            "peak_sums": summed,
            "cold_start": os.environ.get(COLD_ENV) == "1",
        }
    )
    out.write_text(json.dumps(runs, indent=1))


def _is_nb_cell(item: pytest.Item) -> bool:
    return type(item).__name__ == "IPyNbCell"


# Chapters that cannot run at all where Triton cannot (glibc older than 2.35, not Linux): skipped
# there with the reason, once in the header. A Triton that should run but is broken still fails.
TRITON_CHAPTERS = ("09_triton_serving.ipynb", "09b_production_front.ipynb")


def _triton_reason() -> str | None:
    from helpers.serving.triton_server import unavailable_reason

    return unavailable_reason()


def pytest_report_header(config: pytest.Config) -> str | None:
    reason = _triton_reason()
    return f"skipping {', '.join(TRITON_CHAPTERS)}: {reason}" if reason else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _triton_reason()
    if not reason:
        return
    mark = pytest.mark.skip(reason=f"Triton cannot run here: {reason}")
    for item in items:
        if _is_nb_cell(item) and Path(str(item.fspath)).name in TRITON_CHAPTERS:
            item.add_marker(mark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any):  # noqa: ANN201 - pytest hook
    outcome = yield
    report = outcome.get_result()
    if not _is_nb_cell(item) or report.when != "call":
        return
    run = _runs.setdefault(
        str(item.parent.fspath), {"outputs": {}, "ok": True, "start": time.time()}
    )
    run["ok"] = run["ok"] and report.passed
    # Keyed by the cell's own id (nbformat 4.5), not by nbval's counter, whose numbering is nbval's
    # business: the hand-over to the book cache must not depend on it.
    cell_id = getattr(getattr(item, "cell", None), "id", None) or f"#{item.cell_num}"
    run["outputs"][cell_id] = list(getattr(item, "test_outputs", None) or [])


def pytest_runtest_setup(item: pytest.Item) -> None:
    key = str(getattr(item, "parent", None) and item.parent.fspath)
    if _is_nb_cell(item) and key not in _starts:
        # the notebook's clock starts with its first cell (kernel start included)
        _starts[key] = time.time()
        _start_peak()
        if os.environ.get(COLD_ENV) == "1":
            _start_cold(Path(key))


def _start_peak() -> None:
    """Sample the peak memory of this process's children (the kernel, its servers and workers)
    while the notebook runs; ``book/workshop.md`` sizes a shared hub from these peaks."""
    global _peak
    from helpers.core.process_memory import TreeMemory

    _peak = TreeMemory().start()


COLD_ENV = "COURSE_COLD_START"


def _start_cold(path: Path) -> None:
    """``COURSE_COLD_START=1``: the notebook starts as from a fresh clone.

    Before its kernel starts (this hook runs before nbval's setup), the notebook gets an empty
    ledger folder of its own and ``notebooks/artifacts`` is removed, so no chapter can lean on
    what an earlier one wrote (``make test`` runs every chapter this way; chapter 10 then shows
    only its own rungs, without the journey of the chapters before it).
    """
    import shutil

    from helpers.record.ledger import RESULTS_ENV

    fresh = ROOT / "_build" / "cold" / path.stem
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    os.environ[RESULTS_ENV] = str(fresh)
    shutil.rmtree(path.parent / "artifacts", ignore_errors=True)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if not _is_nb_cell(item) or (nextitem is not None and nextitem.parent is item.parent):
        return
    key = str(item.parent.fspath)
    if key in _starts:
        _record_time(Path(key), time.time() - _starts.pop(key), _runs.get(key, {}).get("ok", False))
    run = _runs.pop(str(item.parent.fspath), None)
    if run and os.environ.get(OUTPUTS_ENV):
        _save_executed(Path(key), run, Path(os.environ[OUTPUTS_ENV]))
    from helpers.core.environment import fewest

    partial = item.config.getoption("-k") or item.config.getoption("-m")
    if run and run["ok"] and not partial and not fewest():
        # A mismatch raises: the book would otherwise execute every notebook a second time, silently.
        _cache_executed(Path(str(item.parent.fspath)), run)


OUTPUTS_ENV = "COURSE_NBVAL_OUTPUTS"


def _save_executed(path: Path, run: dict[str, Any], folder: Path) -> None:
    """Write the notebook with the outputs nbval collected to ``folder/<name>.ipynb``."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        outputs = run["outputs"].get(cell.get("id"))
        if outputs is not None:
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cell.execution_count = n + 1
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / path.name))


def _cache_executed(path: Path, run: dict[str, Any]) -> None:
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    ids = [c.get("id") for c in code]
    if set(run["outputs"]) != set(ids) or len(set(ids)) != len(ids):
        raise RuntimeError(
            f"{path.name}: nbval ran cells {sorted(run['outputs'])[:5]}... but the notebook's code "
            f"cells are {ids[:5]}...; cannot hand the outputs to the book's execution cache "
            "(every code cell needs a unique id: nbformat 4.5)"
        )
    for n, cell in enumerate(code):
        cell.outputs = [nbformat.from_dict(o) for o in run["outputs"][cell["id"]]]
        cell.execution_count = n + 1
    cache_dir = _cache_dir()
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    cache = get_cache(str(cache_dir))
    cache.cache_notebook_bundle(
        CacheBundleIn(nb, str(path), data={"execution_seconds": time.time() - run["start"]}),
        check_validity=False,
        overwrite=True,
    )
