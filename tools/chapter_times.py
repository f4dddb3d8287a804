"""Each chapter's "Time" line, generated from measured run times and the page's own size.

A chapter header states how long the chapter takes: running it (measured: nbval's wall time of the
whole notebook in quick mode on a named CPU; a full-size run on the same CPU; a GPU estimate
labelled as one), reading it and doing its exercises (estimated from its words, code lines and
exercises, and said to be estimates). The measured figures live in one file,
``results/reference/chapter_times.json``; this tool writes the "**Time:**" paragraph of every
chapter from it, so a page cannot state a time nobody measured (``tests/test_chapter_times.py``
checks that every page matches the file).

    python tools/chapter_times.py record _build/nbval_times/quick.json   # a quiet nbval run's times
    python tools/chapter_times.py write                                  # rewrite the Time lines
    python tools/chapter_times.py check                                  # exit 1 if a page differs

Reading pace: 180 words and 25 lines of code a minute (a learner who reads the code to follow
it); an exercise: 7 minutes (learners took 3-14 minutes per exercise in the walkthroughs).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "results" / "reference" / "chapter_times.json"
WORDS_PER_MIN = 180
CODE_LINES_PER_MIN = 25
MIN_PER_EXERCISE = 7
HIDDEN = {"remove-input", "remove-cell", "hide-cell", "hide-input"}
_TIME_PARA = re.compile(r"\*\*Time:\*\*.*?(?=\n\n|\Z)", re.S)

__all__ = ["page_size", "time_line", "chapters", "write", "check", "record"]


def chapters(root: Path = ROOT) -> list[Path]:
    """The chapter notebooks (appendices have no Time line)."""
    return sorted(p for p in (root / "notebooks").glob("[0-9][0-9]*.ipynb"))


def _cells(nb: Path) -> list[dict[str, Any]]:
    return json.loads(nb.read_text(encoding="utf-8"))["cells"]


def page_size(nb: Path) -> dict[str, int]:
    """Words of prose, lines of code shown (hidden and solution cells excluded), exercises."""
    words = lines = 0
    exercises = 0
    for c in _cells(nb):
        src = "".join(c["source"])
        tags = set(c.get("metadata", {}).get("tags", []))
        if c["cell_type"] == "markdown":
            if "**Time:**" in src:
                src = _TIME_PARA.sub("", src)
            words += len(re.findall(r"[A-Za-z0-9][\w'-]*", src))
            block = re.search(r"^## Exercises\s*$(.*?)(?=^#{1,2} |\Z)", src, re.M | re.S)
            if block:
                exercises += len(re.findall(r"^\d+\. ", block.group(1), re.M))
        elif c["cell_type"] == "code" and not tags & HIDDEN:
            lines += sum(1 for line in src.splitlines() if line.strip())
    return {"words": words, "code_lines": lines, "exercises": exercises}


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def time_line(stem: str, size: dict[str, int], times: dict[str, Any]) -> str:
    """The "**Time:**" paragraph of one chapter (wrapped at 100 characters)."""
    machine = times["machine"]
    quick = times["quick"].get(stem)
    parts = []
    if quick is not None:
        parts.append(
            f"running it takes {_minutes(quick)} in quick mode (measured: nbval, "
            f"{machine['cpu']}, {machine['cores']} cores, {times['quick_date']})"
        )
    full = times.get("full_cpu", {}).get(stem)
    if full is not None:
        parts.append(f"{_minutes(full)} at full size on the same CPU (measured)")
    gpu = times.get("gpu_estimate", {}).get(stem)
    if gpu:
        parts.append(
            "on a GPU about "
            + ", ".join(f"{_minutes(s)} ({name})" for name, s in gpu.items())
            + " (an estimate from the chapter's work against published peaks, until a GPU run "
            "replaces it)"
        )
    read = math.ceil(size["words"] / WORDS_PER_MIN + size["code_lines"] / CODE_LINES_PER_MIN)
    ex = size["exercises"] * MIN_PER_EXERCISE
    text = (
        "**Time:** "
        + ("; ".join(parts) + ". " if parts else "")
        + f"Reading it takes about {read} minutes and its {size['exercises']} exercises about "
        f"{ex} (estimates: {size['words']:,} words at {WORDS_PER_MIN} a minute, "
        f"{size['code_lines']} lines of code at {CODE_LINES_PER_MIN}, "
        f"{MIN_PER_EXERCISE} minutes an exercise)."
    )
    import textwrap

    return "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False))


def _load_times(path: Path = TIMES) -> dict[str, Any]:
    return json.loads(path.read_text())


def _rewrite(nb: Path, times: dict[str, Any], dry: bool) -> bool:
    data = json.loads(nb.read_text(encoding="utf-8"))
    for c in data["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown" and "**Time:**" in src:
            new = _TIME_PARA.sub(lambda _: time_line(nb.stem, page_size(nb), times), src, count=1)
            if new == src:
                return False
            if not dry:
                c["source"] = new.splitlines(keepends=True)
                nb.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
            return True
    raise ValueError(f"{nb.name}: no '**Time:**' paragraph in any markdown cell")


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every chapter's Time line from the times file; the chapters that changed."""
    times = _load_times(root / TIMES.relative_to(ROOT))
    return [nb.stem for nb in chapters(root) if _rewrite(nb, times, dry=False)]


def check(root: Path = ROOT) -> list[str]:
    """The chapters whose Time line differs from what the times file gives."""
    times = _load_times(root / TIMES.relative_to(ROOT))
    return [nb.stem for nb in chapters(root) if _rewrite(nb, times, dry=True)]


def record(runs_file: Path, machine: dict[str, Any], out: Path = TIMES) -> dict[str, Any]:
    """Put the last passing quick-mode time of each chapter from ``runs_file`` into the times file."""
    runs = json.loads(Path(runs_file).read_text())
    quick = {}
    for r in runs:
        if r["passed"]:
            quick[r["notebook"]] = r["seconds"]
    times = _load_times(out) if out.exists() else {}
    times.update(
        machine=machine,
        quick={k: quick[k] for k in sorted(quick) if k[:2].isdigit()},
        quick_date=max(r["time"] for r in runs)[:10],
        quick_loadavg_max=max(r["loadavg"] for r in runs),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(times, indent=1) + "\n")
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record a quiet nbval run's times")
    rec.add_argument("runs", type=Path)
    sub.add_parser("write", help="rewrite every chapter's Time line")
    sub.add_parser("check", help="exit 1 when a chapter's Time line differs from the file")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        sys.path.insert(0, str(ROOT / "src"))
        from helpers.core.environment import environment_report

        env = environment_report()
        machine = {"cpu": env["cpu"], "cores": env["cores"], "flags": env.get("cpu_features")}
        print(json.dumps(record(args.runs, machine), indent=1))
        return 0
    if args.cmd == "write":
        print("rewrote:", ", ".join(write()) or "nothing")
        return 0
    stale = check()
    if stale:
        print("Time lines differ from results/reference/chapter_times.json:", ", ".join(stale))
        print("run: python tools/chapter_times.py write")
        return 1
    print("chapter_times: every Time line matches the measured times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
