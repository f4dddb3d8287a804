"""`make fullcpu`: every notebook at full-mode sizes on this CPU, with the fewest repeats.

Each notebook runs under nbval (``--nbval-lax``) with ``COURSE_MODE=full COURSE_FEWEST=1``: full
mode's sizes and code paths, one warm-up and three timed calls, a tenth of its training steps
(``helpers.core.environment.fewest``), so that every branch and assert runs on a CPU in about an
hour, in a pytest process of its own, so that its figures are its own:

- ``wall_s``: the process's wall time (kernel start, every cell, shutdown);
- ``peak_pss_mib``: the largest sum of proportional memory over the process tree (pytest, the
  kernel and its children), sampled every 0.5 s (``helpers.core.process_memory``): forked workers
  sharing a model's weights count them once; ``peak_kernel_pss_mib`` without pytest itself;
  ``peak_rss_mib`` the sum of resident memory (shared pages once per process: an upper bound);
- ``gpu_skips``: the cells that printed a GPU-only skip line, and what they would have measured;
- ``trainings``: the cells that trained a model: steps, time, held-out accuracy and the page's bar;
- ``passed``, the failing cells with their first error line, and the slowest cells.

The table goes to ``results/reference/<cpu>-<flags>-full-cpu/`` (``full_cpu.json``, ``README.md``;
``helpers.record.ledger.machine_slug(features=True)``). Its times say how long a full-size run
takes on this CPU, not reference timings. ``--only 04 05`` reruns some notebooks into the table.

    python tools/full_cpu_run.py [--only STEM ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from helpers.core.hardware import describe_machine, machine_facts  # noqa: E402
from helpers.core.process_memory import TreeMemory  # noqa: E402 - one sampler (conftest too)

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "results" / "local" / "fullcpu"  # executed notebooks, junit files, the ledger
SKIP_RE = re.compile(
    r"SKIPPED\s+on\s+this\s+machine\s+\(no\s+CUDA\s+GPU\):\s*(.*?)\.\s+With\s+a\s+GPU", re.S
)
# A chapter's own skip line for a GPU-only step ("SKIPPED here: TensorRT INT8 ...", "SKIPPED: ...")
OTHER_SKIP_RE = re.compile(r"SKIPPED(?: here)?:[ \t]*([^\n]+)")
# helpers.workload.training.TrainResult's line (with held-out accuracy) and a page's bar for it
TRAINED_RE = re.compile(
    r"(\d+) steps of batch (\d+) in ([\d.]+) s on (\S+) \([^)]*\); loss \S+ -> \S+ "
    r"\(mean of the last 10%\), held-out accuracy ([\d.]+)%"
)
BAR_RE = re.compile(r"the bar ([\d.]+)%")
RUN_ENV = {
    "COURSE_MODE": "full",
    "COURSE_FEWEST": "1",
    "PYTHONHASHSEED": "0",
    "OMP_WAIT_POLICY": "PASSIVE",
}


def notebooks(only: list[str] | None = None) -> list[Path]:
    """Every notebook, or those whose name starts with one of ``only`` (``04``, ``07a_``...),
    in the order given."""
    every = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not only:
        return every
    chosen = []  # in the order given: the slowest last, where time may run out
    for o in only:
        chosen += [p for p in every if p.stem.startswith(o) and p not in chosen]
    missing = [o for o in only if not any(p.stem.startswith(o) for p in every)]
    if missing:
        raise SystemExit(f"no notebook starts with: {', '.join(missing)}")
    return chosen


def code_heads(nb: Path) -> list[str]:
    """The first line of each code cell, in order (nbval's ``Cell N`` counts code cells from 0)."""
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]).strip() for c in cells if c["cell_type"] == "code"]
    return [s.splitlines()[0][:80] if s else "" for s in sources]


def cell_texts(executed: Path) -> list[str]:
    """What each code cell of an executed notebook printed (streams and plain-text results),
    in code-cell order; nothing when the notebook was not saved."""
    if not executed.exists():
        return []
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]

    def text(out: dict[str, Any]) -> str:
        if out.get("output_type") == "stream":
            return "".join(out.get("text", ""))
        return "".join(out.get("data", {}).get("text/plain", ""))

    return ["".join(map(text, c.get("outputs", []))) for c in cells]


def gpu_skips(executed: Path) -> list[dict[str, Any]]:
    """The code cells of an executed notebook that printed a GPU-only skip line, and what."""
    found = []
    for n, text in enumerate(cell_texts(executed)):
        whats = SKIP_RE.findall(text) + OTHER_SKIP_RE.findall(text)
        found += [{"cell": n, "what": " ".join(w.split())[:120]} for w in whats]
    return found


def trainings(executed: Path) -> list[dict[str, Any]]:
    """The code cells of an executed notebook that trained a model and scored it held out
    (``helpers.workload.training.TrainResult``'s line), with the bar the page printed for it
    (``the bar 15.6%``; ``None`` when the cell printed none)."""
    found = []
    for n, text in enumerate(cell_texts(executed)):
        flat = " ".join(text.split())  # a page may wrap the line at any space
        bar = BAR_RE.search(flat)
        for m in TRAINED_RE.finditer(flat):
            steps, batch, seconds, device, accuracy = m.groups()
            found.append(
                {
                    "cell": n,
                    "steps": int(steps),
                    "batch": int(batch),
                    "train_s": float(seconds),
                    "device": device,
                    "accuracy": float(accuracy) / 100,
                    "bar": float(bar.group(1)) / 100 if bar else None,
                }
            )
    return found


def junit_cells(junit: Path) -> list[dict[str, Any]]:
    """nbval's per-cell results from a junit file: cell number, seconds, outcome, first line."""
    if not junit.exists():
        return []
    cells = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        m = re.search(r"Cell (\d+)", case.get("name", ""))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                if tag == "skipped":
                    message = (el.get("message") or el.text or "").strip()
                else:  # the traceback, else the one-line message
                    message = _first_error_line(f"{el.get('message') or ''}\n{el.text or ''}")
                break
        cells.append(
            {
                "cell": int(m.group(1)) if m else -1,
                "seconds": round(float(case.get("time", 0) or 0), 1),
                "outcome": outcome,
                "message": message,
            }
        )
    return cells


def _first_error_line(text: str) -> str:
    """The line of an nbval failure that names the exception, else its first line."""
    lines = [
        ln.strip() for ln in re.sub(r"(\x1b|#x1B)\[[0-9;]*m", "", text).splitlines() if ln.strip()
    ]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", ln):
            return ln[:300]
    return lines[0][:300] if lines else ""


def run_notebook(nb: Path, cell_timeout: int = 3600) -> dict[str, Any]:
    """Execute one notebook under nbval in a pytest process of its own; its row of the table."""
    junit = WORK / "junit" / f"{nb.stem}.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    executed = WORK / "executed" / nb.name
    executed.unlink(missing_ok=True)
    env = dict(os.environ, **RUN_ENV)
    env["COURSE_NBVAL_OUTPUTS"] = str(executed.parent)
    env["COURSE_RESULTS_DIR"] = str(WORK / "ledger")  # chapter 10 reads the earlier chapters
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(nb.relative_to(ROOT)),
        "--nbval-lax", f"--nbval-cell-timeout={cell_timeout}", f"--junitxml={junit}",
    ]  # fmt: skip
    log = WORK / "logs" / f"{nb.stem}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        with TreeMemory(proc.pid) as mem:
            rc = proc.wait()
    wall = time.time() - start
    row = {
        "notebook": nb.stem,
        "rc": rc,
        "wall_s": round(wall, 1),
        "peak_pss_mib": round(mem.peak / 2**20),
        "peak_kernel_pss_mib": round(mem.peak_children / 2**20),
        "peak_rss_mib": round(mem.peak_rss / 2**20),
        "pss_read": mem.pss,  # False: some process counted with its RSS
        "load_max": round(mem.load_max, 2),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
        "peak_at_s": round(mem.peak_at - start, 1) if mem.peak_at else None,
    }
    return cell_results(nb, row)


def cell_at(cells: list[dict[str, Any]], wall_s: float, at_s: float | None) -> int | None:
    """The cell that ran ``at_s`` seconds into a run of ``wall_s``: nbval runs the cells one
    after another, the last ending as the run ends, so each cell's span is counted back from
    the end with the cells' own durations (the kernel's start and teardown, a few seconds,
    shift it a little: a cell of minutes is found). None before the first cell."""
    if at_s is None:
        return None
    end = wall_s
    for c in reversed(cells):
        if end - c["seconds"] <= at_s:
            return c["cell"]
        end -= c["seconds"]
    return None


def cell_results(nb: Path, row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with what nbval's junit file and the executed notebook say about the cells."""
    cells = junit_cells(WORK / "junit" / f"{nb.stem}.xml")
    heads = code_heads(nb)
    head = lambda n: heads[n] if 0 <= n < len(heads) else ""  # noqa: E731
    failed = [c for c in cells if c["outcome"] == "failed"]
    skipped = [c for c in cells if c["outcome"] == "skipped"]
    slow = sorted(cells, key=lambda c: -c["seconds"])[:3]
    executed = WORK / "executed" / nb.name
    return {
        **row,
        "passed": row["rc"] == 0 and not failed and bool(cells) and len(skipped) < len(cells),
        "cells": len(cells),
        "failed": [{**c, "head": head(c["cell"])} for c in failed],
        "nbval_skipped": sorted({c["message"] for c in skipped}) if skipped else [],
        "gpu_skips": [{**s, "head": head(s["cell"])} for s in gpu_skips(executed)],
        "trainings": trainings(executed),
        "slowest": [
            {"cell": c["cell"], "seconds": c["seconds"], "head": head(c["cell"])} for c in slow
        ],
        "cells_timed": [{k: c[k] for k in ("cell", "seconds", "outcome")} for c in cells],
        "peak_cell": cell_at(cells, row["wall_s"], row.get("peak_at_s")),
    }


def machine() -> dict[str, Any]:
    """The machine (:func:`~helpers.core.hardware.machine_facts`), its libraries and the sizes."""
    from helpers.core.environment import environment_report, sizes

    os.environ.update(RUN_ENV)
    env = environment_report()
    return {
        **machine_facts(),
        "libraries": {k: v for k, v in env["libraries"].items() if v},
        "sizes": {k: v for k, v in vars(sizes()).items() if k != "fewest"},
    }


def default_out() -> Path:
    os.environ.update(RUN_ENV)
    from helpers.record.ledger import machine_slug

    return ROOT / "results" / "reference" / f"{machine_slug(features=True)}-cpu"


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def table(data: dict[str, Any]) -> str:
    """The markdown page of the folder: what ran, then one row per notebook."""
    m = data["machine"]
    rows = [data["chapters"][k] for k in sorted(data["chapters"])]
    total = sum(r["wall_s"] for r in rows)
    s = m["sizes"]
    lines = [
        "# Full-size run on a CPU (`make fullcpu`)",
        "",
        f"Every notebook executed by nbval (`--nbval-lax`) with `COURSE_MODE=full "
        f"COURSE_FEWEST=1` on {describe_machine(m, memory=True)}, no GPU. "
        f"Full-mode sizes ({s['arch']}, {s['image_size']} px, batch {s['batch_size']}, "
        f"sweep {', '.join(map(str, s['batch_sweep']))}, {s['train_images']} training images); "
        f"repeats cut to the fewest that run every step (warm-up {s['warmup']}, timed calls "
        f"{s['repeats']}, training steps {s['train_steps']}). Work that runs OneFlow on a CPU "
        "uses quick sizes in full mode too (`environment.sizes_on`). These wall times say how "
        "long a full-size run takes on this CPU; they are not reference timings.",
        "",
        f"Total: {_minutes(total)} for {len(rows)} notebooks; "
        f"{sum(r['passed'] for r in rows)} passed. Peak memory: the largest sum of "
        "proportional memory (PSS: a page shared by n processes counts 1/n in each) over the "
        "process tree (pytest, kernel, the kernel's child processes), sampled every 0.5 s; "
        "in brackets the sum of resident memory (RSS), which counts shared pages once per "
        "process. Run from "
        f"{min(r['started'] for r in rows)} to {data.get('finished', '?')}; highest 1-minute "
        f"load average seen: {max(r.get('load_max', 0) for r in rows):.1f}."
        + (
            " Rows marked (rerun) ran again after a change (`--only`), merged into this table."
            if any(r.get("rerun") for r in rows)
            else ""
        ),
        "",
        "| notebook | result | wall time | peak memory | GPU-only skips | slowest cell |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        result = "passed" if r["passed"] else f"FAILED (rc {r['rc']})"
        result += " (rerun)" if r.get("rerun") else ""
        if r["nbval_skipped"]:
            result = "skipped: " + "; ".join(r["nbval_skipped"])[:120]
        skips = "; ".join(f"cell {s['cell']}: {s['what']}" for s in r["gpu_skips"]) or "none"
        slow = r["slowest"][0] if r["slowest"] else None
        slow_text = f"cell {slow['cell']}, {_minutes(slow['seconds'])}" if slow else ""
        lines.append(
            f"| {r['notebook']} | {result} | {_minutes(r['wall_s'])} | "
            f"{peak_text(r)} | {skips.replace('|', '/')} | {slow_text} |"
        )
    trained = [(r["notebook"], t) for r in rows for t in r.get("trainings", [])]
    if trained:
        lines += ["", "## Trainings (held-out accuracy against the bar each page asserts)", ""]
        lines += [
            f"- {nb}, cell {t['cell']}: {t['steps']} steps of batch {t['batch']} in "
            f"{_minutes(t['train_s'])} on {t['device']}, {t['accuracy']:.1%} held out"
            + (f" (bar {t['bar']:.1%})" if t["bar"] is not None else "")
            for nb, t in trained
        ]
    fails = [(r["notebook"], f) for r in rows for f in r["failed"]]
    if fails:
        lines += ["", "## Failures", ""]
        lines += [f"- {nb}, cell {f['cell']} (`{f['head']}`): {f['message']}" for nb, f in fails]
    return "\n".join(lines) + "\n"


def peak_text(row: dict[str, Any]) -> str:
    """``'3.1 GiB (RSS 5.2 GiB)'``; a run from before PSS was read says ``RSS`` alone."""
    rss = f"{row['peak_rss_mib'] / 1024:.1f} GiB"
    if "peak_pss_mib" not in row:
        return f"RSS {rss}"
    flag = "" if row.get("pss_read", True) else ", some processes as RSS"
    where = f", in cell {row['peak_cell']}" if row.get("peak_cell") is not None else ""
    return f"{row['peak_pss_mib'] / 1024:.1f} GiB (RSS {rss}{flag}){where}"


def write(out: Path, data: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "full_cpu.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "README.md").write_text(table(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="notebook name prefixes (default: all)")
    args = parser.parse_args(argv)
    out = default_out()
    path = out / "full_cpu.json"
    data = json.loads(path.read_text()) if path.exists() and args.only else {"chapters": {}}
    data["machine"] = machine()
    data["command"] = "make fullcpu (python tools/full_cpu_run.py)"
    for nb in notebooks(args.only):
        print(f"{time.strftime('%H:%M:%S')} {nb.stem} ...", flush=True)
        row = run_notebook(nb)
        row["rerun"] = bool(args.only)  # merged into an earlier run's table
        data["chapters"][nb.stem] = row
        data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write(out, data)  # after every notebook: an interrupted run keeps what it measured
        state = "passed" if row["passed"] else f"FAILED {[f['cell'] for f in row['failed']]}"
        print(
            f"  {state}, {_minutes(row['wall_s'])}, peak {peak_text(row)}, "
            f"{len(row['gpu_skips'])} GPU-only skips",
            flush=True,
        )
    print(f"table: {out / 'README.md'}")
    return 0 if all(r["passed"] or r["nbval_skipped"] for r in data["chapters"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
