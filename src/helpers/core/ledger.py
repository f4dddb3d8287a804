"""The results ledger: JSON records of measurements, one file per chapter.

Chapters call :func:`record`; the capstone and the book's reference tables call
:func:`load`.  Records carry the machine, library versions, mode, the threads PyTorch
used and (passed by the chapter) the device and precision, so a number is never
separated from where and how it was measured.  The folder is ``$COURSE_RESULTS_DIR``
or ``results/local/<mode>`` at the repository root, so quick-mode and full-mode
numbers never mix; committed reference runs live in ``results/reference/<machine>-<mode>/``.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "RESULTS_ENV",
    "repo_root",
    "ledger_dir",
    "machine_slug",
    "reference_runs",
    "record",
    "load",
    "lookup",
]

RESULTS_ENV = "COURSE_RESULTS_DIR"


def repo_root() -> Path:
    """The course repository root (the folder holding ``_toc.yml``)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "_toc.yml").exists():
            return parent
    return Path.cwd()


def ledger_dir() -> Path:
    """Folder of the ledger files (created when missing): one per mode unless ``$COURSE_RESULTS_DIR``."""
    if os.environ.get(RESULTS_ENV):
        path = Path(os.environ[RESULTS_ENV])
    else:
        from helpers.core.environment import get_mode

        path = repo_root() / "results" / "local" / get_mode()
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine_slug() -> str:
    """A folder-safe name for this machine and mode, e.g. ``nvidia-h200-full`` or ``amd-epyc-2core-quick``."""
    import re

    from helpers.core.environment import environment_report

    env = environment_report()
    base = env["gpu"].split("(")[0] if env["gpu"] else f"{env['cpu']} {env['cores']}core"
    slug = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")
    return f"{slug}-{env['mode']}"


def reference_runs(root: Path | str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Committed reference ledgers: ``{machine folder name: records}`` from ``results/reference/*/``."""
    base = Path(root) if root is not None else repo_root() / "results" / "reference"
    if not base.is_dir():
        return {}
    return {
        d.name: load(folder=d)
        for d in sorted(base.iterdir())
        if d.is_dir() and any(d.glob("*.json"))
    }


def _check_name(kind: str, value: str) -> None:
    if (
        not isinstance(value, str)
        or not value
        or any(c in value for c in "/\\")
        or value.startswith(".")
    ):
        raise ValueError(f"{kind} must be a non-empty name without path separators, got {value!r}")


def record(chapter: str, name: str, value: float, unit: str, **extra: Any) -> dict[str, Any]:
    """Add (or replace) the measurement ``name`` of ``chapter``; returns the stored record."""
    from helpers.core.environment import environment_report

    _check_name("chapter", chapter)
    _check_name("name", name)
    from helpers.core.ledger_names import check as check_listed

    check_listed(chapter, name)  # a course chapter's record names come from one table
    # numbers.Real also admits NumPy scalars (np.float32, np.int64), which notebooks often pass.
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"value of {name!r} must be a finite number, got {value!r}")
    env = environment_report()
    torch = sys.modules.get("torch")
    rec = {
        "chapter": chapter,
        "name": name,
        "value": float(value),
        "unit": unit,
        "mode": env["mode"],
        # what the chapter passes wins; None says the chapter did not name it
        "device": None,
        "precision": None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "machine": {k: env[k] for k in ("cpu", "cores", "gpu", "driver", "cuda")},
        "versions": {k: v for k, v in env["libraries"].items() if v},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **extra,
    }
    path = ledger_dir() / f"{chapter}.json"
    records = [r for r in _read(path) if r["name"] != name]
    records.append(rec)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1, default=str))
    tmp.replace(path)
    return rec


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"ledger file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise ValueError(f"ledger file {path} must hold a list of records")
    return data


def load(chapter: str | None = None, folder: Path | str | None = None) -> list[dict[str, Any]]:
    """All records (of one chapter, if given) from ``folder`` (default: the ledger folder)."""
    root = Path(folder) if folder is not None else ledger_dir()
    if chapter is not None:
        _check_name("chapter", chapter)
        return _read(root / f"{chapter}.json")
    out: list[dict[str, Any]] = []
    for path in sorted(root.glob("*.json")):
        out.extend(_read(path))
    return out


def lookup(chapter: str, name: str, folder: Path | str | None = None) -> dict[str, Any] | None:
    """The record ``name`` of ``chapter``, or None if it was never measured."""
    for rec in load(chapter, folder):
        if rec["name"] == name:
            return rec
    return None


if (
    __name__ == "__main__"
):  # `python -m helpers.core.ledger slug` prints the machine slug (used by `make bench`)
    import sys

    if sys.argv[1:] == ["slug"]:
        print(machine_slug())
    else:
        raise SystemExit("usage: python -m helpers.core.ledger slug")
