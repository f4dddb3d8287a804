"""Typed figures and typed verdicts on the chapter pages are held to what was measured.

A sentence that states a result is generated from it (CONTRIBUTING.md). Two things a page can
still type by hand, and what this file checks about them:

1. **Speed-up figures typed in markdown** ("1.15x", "about 4.5x", "25x"). Only markdown cells
   are scanned: a figure printed by a code cell is generated, not typed. Each typed figure must
   equal, within its printed rounding (``1.15x`` means 1.145 to 1.155), a speed-up (unit ``x``)
   the committed reference ledger (``results/reference/<machine>-<mode>/<chapter>.json``) holds
   for *that* chapter, or a case-study figure in :mod:`helpers.record.reported`. What is neither
   (a hypothetical "10x" story, arithmetic such as "at most ~1.5x", the A/A expectation 1.00x)
   is listed in :data:`ALLOWED`, one reason per entry. The check cannot tell which record a
   sentence *means*, only that some measured or reported figure has that value: a typed figure
   that matches no record at all is stale or invented.
2. **Absolute verdicts** ("can only save", "can only hold ... back", "always faster", "never
   slower"). A measured comparison can come out either way, so a sentence that states its
   direction is chosen by the measurement (``ratio.verdict()``, an ``if`` on the median), never
   typed as a law. These phrases are flagged in markdown cells *and* in the string literals of
   code cells (a generated line printed whatever was measured is still typed). The check is a
   phrase list, not a reading of the sentence: it catches the "can only"/"always"/"never"
   followed by a gain-or-loss verb that reviews found beside contrary measurements; it does not
   prove that every "faster" on a page agrees with the ledger.

The book's own pages (``book/*.md``, ``book/zh/*.md``, README) are held to the same rule against
every chapter's reference figures and the case studies', with :data:`ALLOWED_PAGES`.

``test_planted_*`` show both checks failing on a planted stale figure and a planted claim.
"""

# course-test-group: no-oneflow
# (OneFlow is named here only in allow-list reasons)

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from helpers.record import ledger, reported

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# A speed-up typed as a number followed by "x" or "×" ("1.15x", "25x", "4.6×"); not "224x224",
# "3 x sqrt(...)" (a formula, with a space), nor anything inside `code` or $math$.
_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:x|×)(?![\w×])")
_CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`|\$[^$\n]*\$", re.S)

# A typed law about a measured direction: "can only save", "can only hold a process back",
# "always faster", "never slower", "can only be slower".
_ABSOLUTE = re.compile(
    r"\b(?:can only|always|never)\s+(?:be\s+|make\s+\w+\s+)?"
    r"(?:save|saves|help|helps|hurt|hurts|hold|holds|slow|slows|speed|speeds|win|wins|"
    r"lose|loses|gain|gains|cost|costs|faster|slower)\b",
    re.I,
)

# (notebook stem, typed figure) -> why it is not a ledger or case-study figure.
ALLOWED: dict[tuple[str, str], str] = {
    ("00_measuring", "10x"): "a hypothetical claim ('my model got 10x faster' stories)",
    ("03_dynamic_to_static", "1.00x"): "the A/A control's expected value, not a measurement",
    ("04_pruning", "1.00x"): "the value a step's spread must hold to be inconclusive",
    ("04_pruning", "1.5x"): "arithmetic: removing one of three units of work is at most 3/2",
    ("08_int8_quantization", "3x"): "a FLOP count: a training step is about 3x the forward",
}

# (page, typed figure) -> why a book page may type it.
ALLOWED_PAGES: dict[tuple[str, str], str] = {
    ("book/setup.md", "100x"): "a warning's range ('10-100x') of what spinning threads can cost; "
    "chapter 7 measures the wait policy itself",
    ("book/workshop.md", "85x"): "what a learner walk-through saw with other thread settings "
    "(a teacher's note), not a course measurement",
}
PAGES = sorted(
    [*(ROOT / "book").glob("*.md"), *(ROOT / "book" / "zh").glob("*.md"), ROOT / "README.md"]
)


def typed_figures(markdown: str) -> list[tuple[str, float, int]]:
    """Every speed-up typed in ``markdown``: (as typed, value, decimals printed)."""
    text = _CODE_SPAN.sub(" ", markdown)
    out = []
    for m in _FIGURE.finditer(text):
        number = m.group(1)
        decimals = len(number.split(".")[1]) if "." in number else 0
        out.append((m.group(0).replace("×", "x"), float(number), decimals))
    return out


def known_figures(chapter: str, runs: dict[str, list[dict]] | None = None) -> list[float]:
    """Speed-ups a page of ``chapter`` may quote: its reference-ledger ratios and the case studies'."""
    runs = ledger.reference_runs() if runs is None else runs
    values = [
        float(r["value"])
        for records in runs.values()
        for r in records
        if r.get("chapter") == chapter
        and r.get("unit") == "x"
        and isinstance(r.get("value"), (int, float))
    ]
    for table in (reported.RESNET101_ONEFLOW, reported.MOBILENETV2_EMBEDDER):
        values.extend(float(v) for v in table.values())
    return values


def stale_figures(
    cells: list[dict], chapter: str, runs: dict[str, list[dict]] | None = None
) -> list[str]:
    """Typed figures in markdown cells that match no ledger or case-study figure of ``chapter``."""
    known = known_figures(chapter, runs)
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for typed, value, decimals in typed_figures(_source(cell)):
            if (chapter, typed) in ALLOWED:
                continue
            half = 0.5 * 10.0**-decimals + 1e-9
            if not any(abs(k - value) <= half for k in known):
                problems.append(
                    f"{chapter} cell {i}: typed {typed} matches no reference-ledger "
                    f"speed-up of this chapter nor a case-study figure"
                )
    return problems


def _strings(code: str) -> list[str]:
    """The string literals of a code cell (f-strings' literal parts too)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # IPython magics: fall back to the raw text
        return [code]
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def absolute_claims(cells: list[dict], chapter: str) -> list[str]:
    """Typed laws about a measured direction, in markdown and in code cells' strings."""
    problems = []
    for i, cell in enumerate(cells):
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            texts = [_CODE_SPAN.sub(" ", src)]
        elif cell["cell_type"] == "code":
            # adjacent literals ("... can only " "hold ...") read as one sentence
            texts = [" ".join(_strings(src))]
        else:
            continue
        for text in texts:
            for m in _ABSOLUTE.finditer(" ".join(text.split())):
                problems.append(
                    f"{chapter} cell {i} ({cell['cell_type']}): typed verdict "
                    f"'{m.group(0)}': let the measurement choose the direction"
                )
    return problems


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _cells(nb: Path) -> list[dict]:
    return json.loads(nb.read_text(encoding="utf-8"))["cells"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_typed_figures_match_the_ledger_or_the_case_study(nb):
    problems = stale_figures(_cells(nb), nb.stem)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_typed_absolute_verdicts(nb):
    problems = absolute_claims(_cells(nb), nb.stem)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_book_pages_type_only_ledger_or_case_study_figures(page):
    """A figure typed on a book page matches some chapter's reference ratio or a case study's."""
    runs = ledger.reference_runs()
    known = [
        float(r["value"])
        for records in runs.values()
        for r in records
        if r.get("unit") == "x" and isinstance(r.get("value"), (int, float))
    ] + known_figures("(no chapter)", {})
    name = str(page.relative_to(ROOT))
    stale = [
        typed
        for typed, value, decimals in typed_figures(page.read_text(encoding="utf-8"))
        if (name, typed) not in ALLOWED_PAGES
        and not any(abs(k - value) <= 0.5 * 10.0**-decimals + 1e-9 for k in known)
    ]
    assert not stale, f"{name}: typed {stale} match no reference ratio nor case-study figure"


def test_allow_list_entries_are_still_used():
    """An allowed figure no longer on its page is dropped from the list."""
    typed = {
        (nb.stem, t)
        for nb in NOTEBOOKS
        for c in _cells(nb)
        if c["cell_type"] == "markdown"
        for t, _, _ in typed_figures(_source(c))
    }
    assert not set(ALLOWED) - typed, sorted(set(ALLOWED) - typed)
    on_pages = {
        (str(p.relative_to(ROOT)), t)
        for p in PAGES
        for t, _, _ in typed_figures(p.read_text(encoding="utf-8"))
    }
    assert not set(ALLOWED_PAGES) - on_pages, sorted(set(ALLOWED_PAGES) - on_pages)


def test_typed_figures_reads_rounding_and_skips_code():
    found = typed_figures("about **1.15x**, 25x and 4.6× but not `2.0x`, 224x224 or 3 x n")
    assert found == [("1.15x", 1.15, 2), ("25x", 25.0, 0), ("4.6x", 4.6, 1)]


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text}


def test_planted_stale_figure_is_reported():
    """A copy of chapter 5's markdown with one stale figure typed in: the check names it."""
    nb = ROOT / "notebooks" / "05_parallelism.ipynb"
    cells = _cells(nb)
    assert not stale_figures(cells, nb.stem)  # the page itself is clean
    planted = [*cells, _md("On this CPU batching gained 1.15x against 4.5x for PyTorch.")]
    problems = stale_figures(planted, nb.stem)
    print("\n".join(problems))
    assert len(problems) == 2 and all(f"cell {len(cells)}" in p for p in problems)
    assert "1.15x" in problems[0] and "4.5x" in problems[1]
    # a figure the ledger holds, typed at its printed rounding, passes
    batch = ledger.lookup(nb.stem, "batch_gain_torch", _reference_folder())
    if batch is not None:
        ok = [*cells, _md(f"PyTorch gained {batch['value']:.2f}x from batching.")]
        assert not stale_figures(ok, nb.stem)


def test_planted_absolute_verdict_is_reported():
    """A typed law in markdown and in a printed string: both are named."""
    nb = ROOT / "notebooks" / "03_dynamic_to_static.ipynb"
    cells = _cells(nb)
    planted = [
        *cells,
        _md("On a CPU the graph can only save the per-op overhead."),
        {"cell_type": "code", "source": 'show.say("the lock can only "\n"hold it back")'},
    ]
    problems = absolute_claims(planted, nb.stem)
    print("\n".join(problems))
    assert [p.split(":")[0] for p in problems[-2:]] == [
        f"{nb.stem} cell {len(cells)} (markdown)",
        f"{nb.stem} cell {len(cells) + 1} (code)",
    ]


def _reference_folder() -> Path | None:
    base = ROOT / "results" / "reference"
    folders = sorted(d for d in base.iterdir() if d.is_dir() and any(d.glob("*.json")))
    return folders[0] if folders else None
