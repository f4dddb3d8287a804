"""What full mode needs of a machine, generated from the committed measurements.

Writes the ``NEEDS`` block of ``src/helpers/core/machine_needs.py``, which the mode choice
(``helpers.core.environment.get_mode``) and ``make doctor`` read:

- host memory at full size: every committed ``make fullcpu`` run
  (``results/reference/*-full-cpu/full_cpu.json``), each chapter's peak over the CPUs that ran
  it (the proportional memory of its whole process tree); the heaviest chapter is the need;
- GPU memory at full size: ``tools/gpu_estimate.py``'s count per chapter (the reference CPU's
  ``gpu_estimate.json``: live tensors on the meta device plus an assumed context per framework;
  no GPU has run full mode yet), the largest over chapters and GPUs;
- host memory in quick mode: ``results/reference/chapter_times.json``'s nbval peaks.

    python tools/machine_needs.py write     # rewrite the block
    python tools/machine_needs.py check     # exit 1 when the block differs from the measurements
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from chapter_times import _swap  # noqa: E402 - one way to rewrite a generated block

MODULE = ROOT / "src" / "helpers" / "core" / "machine_needs.py"
TIMES = ROOT / "results" / "reference" / "chapter_times.json"
_BLOCK = re.compile(r"(# needs:start[^\n]*\n).*?(# needs:end)", re.S)

__all__ = ["needs", "block", "write", "check", "main"]


def _gib(mib: float) -> float:
    return round(mib / 1024, 1)


def _machine(m: dict[str, Any]) -> str:
    return m["cpu"] + (f" ({m['cpu_family']})" if m.get("cpu_family") else "")


def needs(root: Path = ROOT) -> dict[str, Any]:
    """The needs, from the measurements under ``root``."""
    runs = [
        json.loads(f.read_text())
        for f in sorted((root / "results" / "reference").glob("*-full-cpu/full_cpu.json"))
    ]
    if not runs:
        raise ValueError(f"{root}/results/reference: no *-full-cpu/full_cpu.json (make fullcpu)")
    by_chapter: dict[str, float] = {}
    for run in runs:
        for stem, row in run["chapters"].items():
            if stem[:2].isdigit() and row.get("pss_read") and "peak_pss_mib" in row:
                by_chapter[stem] = max(by_chapter.get(stem, 0.0), _gib(row["peak_pss_mib"]))
    heavy = max(by_chapter, key=lambda k: by_chapter[k])
    runs.sort(key=lambda r: r["finished"])
    source = (
        f"make fullcpu on {len(runs)} CPU{'s' if len(runs) > 1 else ''} (peak PSS of the "
        "chapter's process tree): "
        + ", ".join(f"{_machine(r['machine'])} {r['finished'][:10]}" for r in runs)
    )
    times = json.loads((root / TIMES.relative_to(ROOT)).read_text())
    est_path = root / times["gpu_estimate_source"].split(" ")[0]
    est = json.loads(est_path.read_text())
    gpu = {
        (stem, g): v["need_gib"] for stem, per in est["gpu_memory"].items() for g, v in per.items()
    }
    gpu_stem, _ = max(gpu, key=lambda k: (gpu[k], k[0]))
    quick = times["quick_peak_mb"]
    quick_stem = max(quick, key=lambda k: quick[k][0])
    return {
        "full_host_gib": by_chapter[heavy],
        "full_host_chapter": heavy,
        "full_host_source": source,
        "full_host_by_chapter": dict(sorted(by_chapter.items())),
        "full_gpu_gib": max(gpu.values()),
        "full_gpu_chapter": gpu_stem,
        "full_gpu_source": f"{est_path.relative_to(root).as_posix()}: {est['gpu_memory_method']}",
        "quick_host_gib": _gib(quick[quick_stem][0]),
        "quick_host_chapter": quick_stem,
        "quick_host_source": (
            f"results/reference/chapter_times.json: nbval, {times['quick_date']} (peak "
            f"{times.get('quick_peak_sums', 'rss').upper()} of the chapter's process tree)"
        ),
    }


def _literal(value: Any, indent: int = 0) -> str:
    """``value`` as Python source in ``ruff format``'s style (one entry a line, trailing commas)."""
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        if not value:
            return "{}"
        body = "".join(
            f"{pad}{json.dumps(k)}: {_literal(v, indent + 4)},\n" for k, v in value.items()
        )
        return "{\n" + body + " " * indent + "}"
    return json.dumps(value, ensure_ascii=False)


def block(root: Path = ROOT) -> str:
    """The generated lines between the markers."""
    return f"NEEDS: dict[str, Any] = {_literal(needs(root))}\n"


def write(root: Path = ROOT) -> bool:
    """Rewrite the block; True when it changed."""
    return _swap(root / MODULE.relative_to(ROOT), _BLOCK, block(root), dry=False)


def check(root: Path = ROOT) -> bool:
    """True when the block differs from what the measurements give (stale)."""
    return _swap(root / MODULE.relative_to(ROOT), _BLOCK, block(root), dry=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cmd", choices=("write", "check"))
    args = parser.parse_args(argv)
    if args.cmd == "write":
        print("src/helpers/core/machine_needs.py:", "rewritten" if write() else "unchanged")
        return 0
    if check():
        print("src/helpers/core/machine_needs.py's NEEDS differs from the measurements;")
        print("run: python tools/machine_needs.py write")
        return 1
    print("machine_needs: NEEDS matches the committed measurements")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
