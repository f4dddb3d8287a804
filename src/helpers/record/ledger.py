"""The results ledger: JSON records of measurements, one file per chapter (:func:`record`,
:func:`load`), in ``$COURSE_RESULTS_DIR`` or ``results/local/<mode>`` (quick and full never mix);
committed reference runs in ``results/reference/<machine>-<mode>/``.

One shape: ``value`` and ``unit``, with the machine, versions, mode, threads and the chapter's
device and precision; a paired ratio (a RatioSummary as the value) adds ``p25``, ``p75`` and
``rounds``, the one spelling of its spread; ``on=`` adds where and under what load the
measurements behind it ran (:func:`on_machine`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from helpers.core.checks import check_number
from helpers.measure.machine import READERS, measured_loads
from helpers.measure.measurement import RatioSummary
from helpers.record import ledger_names

__all__ = [
    "slug",
    "RESULTS_ENV",
    "ledger_dir",
    "machine_slug",
    "reference_runs",
    "record",
    "load",
    "lookup",
    "on_machine",
]

RESULTS_ENV = "COURSE_RESULTS_DIR"


def slug(label: str) -> str:
    """A label as a record-name segment: ``'ORT int8 (QDQ, U8S8)'`` -> ``'ort_int8_qdq_u8s8'``."""
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def repo_root() -> Path:
    """The course repository root (the folder holding ``_toc.yml``)."""
    found = (p for p in Path(__file__).resolve().parents if (p / "_toc.yml").exists())
    return next(found, Path.cwd())


def ledger_dir() -> Path:
    """Folder of the ledger files (created when missing): one per mode unless ``$COURSE_RESULTS_DIR``."""
    if os.environ.get(RESULTS_ENV):
        path = Path(os.environ[RESULTS_ENV])
    else:
        from helpers.core.environment import get_mode

        path = repo_root() / "results" / "local" / get_mode()
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine_slug(features: bool = False) -> str:
    """A folder-safe name for this machine and mode, e.g. ``nvidia-h200-full``; ``features`` adds
    a CPU's extensions (``...-2core-avx512-vnni-bf16-amx-full``): a VM's model name does not."""
    from helpers.core.environment import environment_report

    env = environment_report()
    base = env["gpu"].split("(")[0] if env["gpu"] else f"{env['cpu']} {env['cores']}core"
    if features and not env["gpu"]:
        base += " " + cpu_features_tag(env["flags"])
    return f"{slug(base).replace('_', '-')}-{env['mode']}"


def cpu_features_tag(flags: list[str] | set[str]) -> str:
    """The CPU features that decide the course's CPU speeds, short: ``avx512-vnni-bf16-amx``."""
    flags = set(flags)
    if "avx512f" in flags:
        tag = ["avx512"] + [f for f in ("vnni", "bf16") if f"avx512_{f}" in flags]
    else:
        tag = ["avx2"] if "avx2" in flags else ["no-avx2"]
    if flags & {"amx_bf16", "amx_int8"}:
        tag.append("amx")
    return "-".join(tag)


def reference_runs(root: Path | str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Committed reference ledgers, ``{machine folder: records}`` (``*-full-cpu`` folders hold
    chapter times, not a ledger)."""
    base = Path(root) if root is not None else repo_root() / "results" / "reference"
    if not base.is_dir():
        return {}
    return {
        d.name: load(folder=d)
        for d in sorted(base.iterdir())
        if d.is_dir() and not d.name.endswith("-full-cpu") and any(d.glob("*.json"))
    }


def _check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not value or re.search(r"[/\\]|^\.", value):
        raise ValueError(f"{kind} must be a non-empty name without path separators, got {value!r}")


def record(
    chapter: str,
    name: str,
    value: float | RatioSummary,
    unit: str | None = None,
    *,
    on: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """Add (or replace) the record ``name`` of ``chapter``, in the module's one shape, and return
    it; ``extra`` fields (batch, device, precision, ...) are stored as given."""
    from helpers.core.environment import environment_report
    from helpers.core.hardware import machine_facts

    _check_name("chapter", chapter)
    _check_name("name", name)
    ledger_names.check(chapter, name)  # a course chapter's record names come from one table
    if {"spread", "iqr"} & set(extra):
        raise ValueError(f"record {name!r}: pass the RatioSummary as the value (p25/p75)")
    if isinstance(value, RatioSummary):
        extra = {**value.as_record(), **({"unit": unit} if unit else {}), **extra}
        value, unit = extra.pop("value"), extra.pop("unit")
    if unit is None:
        raise ValueError(f"record {name!r} needs a unit")
    if on is not None:
        extra = {**on_machine(*(on if isinstance(on, (list, tuple)) else [on])), **extra}
    value = check_number(f"value of {name!r}", value)  # NumPy scalars too, not a bool
    env = environment_report()
    torch = sys.modules.get("torch")
    rec = {
        "chapter": chapter,
        "name": name,
        "value": value,
        "unit": unit,
        "mode": env["mode"],
        # what the chapter passes wins; None says the chapter did not name it
        "device": None,
        "precision": None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "machine": {**machine_facts(), "driver": env["driver"], "cuda": env["cuda"]},
        "versions": {k: v for k, v in env["libraries"].items() if v},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **_process_load(),  # replaced by the chapter's own **on_machine(...) when it passes one
        **extra,
    }
    path = ledger_dir() / f"{chapter}.json"
    records = [r for r in _read(path) if r["name"] != name]
    records.append(rec)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1, default=str))
    tmp.replace(path)
    return rec


def _stamp(scope: str, loads: list[dict[str, Any]], flags: list[bool | None], **more: Any) -> dict:
    """The one shape of a record's ``load`` and ``contended``: contended if any measurement was,
    quiet if every one is known quiet, else unknown (None)."""
    quiet = bool(flags) and all(f is False for f in flags)
    return {
        "load": {
            "scope": scope,
            "measurements": len(flags),
            "contended_measurements": sum(f is True for f in flags),
            "others_cores_max": _max(x.get("others_cores") for x in loads),
            **more,
        },
        "contended": True if any(f is True for f in flags) else False if quiet else None,
    }


def _max(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def on_machine(*measurements: Any) -> dict[str, Any]:
    """Record fields for the measurements (or their ``as_dict()``, from a subprocess) behind one
    figure: threads, cores used, load, contended."""
    if not measurements:
        raise ValueError("on_machine needs at least one measurement")
    rows = [m if isinstance(m, dict) else m.as_dict() for m in measurements]
    for r in rows:
        if "contended" not in r:
            raise ValueError(f"not a measurement (no 'contended' field): {sorted(r)[:8]}")
    every = [r["load"] for r in rows if r.get("load") is not None]
    loads = [x for i, x in enumerate(every) if x not in every[:i]]  # one run: one load, once
    return {
        "threads_given": [r.get("threads") for r in rows],
        "cores_used": [r.get("cores_used") for r in rows],
        **_stamp(
            "the measurements behind this figure",
            loads,
            [r.get("contended") for r in rows],
            loadavg_max=_max(x.get("loadavg_after") for x in loads),
            regions=loads,
        ),
    }


def _process_load() -> dict[str, Any]:
    """The default stamp: every measurement this process took so far, contended if any was."""
    log = measured_loads()
    scope = "every measurement of this process so far" if log else "no measurement in this process"
    loads = [x.as_dict() for x in log]
    return _stamp(scope, loads, [x.contended for x in log], loadavg_at_record=READERS.loadavg())


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
    return [rec for path in sorted(root.glob("*.json")) for rec in _read(path)]


def lookup(chapter: str, name: str, folder: Path | str | None = None) -> dict[str, Any] | None:
    """The record ``name`` of ``chapter``, or None if it was never measured."""
    return next((rec for rec in load(chapter, folder) if rec["name"] == name), None)


if __name__ == "__main__":  # `make bench`: the machine's folder name, and check-quiet DIR
    args = sys.argv[1:]
    if args in (["slug"], ["slug", "--features"]):
        print(machine_slug(features=len(args) == 2))
    elif len(args) == 2 and args[0] == "check-quiet":
        if not any(Path(args[1]).glob("*.json")):
            raise SystemExit(f"check-quiet: no ledger files in {args[1]}")
        bad = [  # quiet or unknown (an old record) passes; contended does not
            f"{r.get('chapter')}/{r.get('name')}: {json.dumps(r.get('load'), default=str)[:200]}"
            for r in load(folder=args[1])
            if r.get("contended") is True
        ]
        if bad:
            print(f"{len(bad)} contended record(s) in {args[1]}:", *bad, sep="\n  ")
            raise SystemExit(1)
        print(f"check-quiet: no contended record in {args[1]}")
    else:
        raise SystemExit(
            "usage: python -m helpers.record.ledger slug [--features] | check-quiet DIR"
        )
