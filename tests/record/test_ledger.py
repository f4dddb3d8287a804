"""helpers.record.ledger: recording and loading measurements (always in a temporary folder here)."""

from __future__ import annotations

import json
import math

import pytest

from helpers.record import ledger


def test_ledger_dir_follows_env(results_dir):
    assert ledger.ledger_dir() == results_dir
    assert results_dir.is_dir()
    assert (ledger.repo_root() / "_toc.yml").exists()


def test_record_and_load(results_dir):
    rec = ledger.record("ch00", "eager_ms", 12.5, "ms", batch=8)
    assert rec["value"] == 12.5 and rec["unit"] == "ms" and rec["batch"] == 8
    assert rec["mode"] in ("quick", "full") and "cpu" in rec["machine"]
    stored = json.loads((results_dir / "ch00.json").read_text())
    assert stored[0]["name"] == "eager_ms"
    assert ledger.load("ch00")[0]["value"] == 12.5
    assert ledger.lookup("ch00", "eager_ms")["batch"] == 8
    assert ledger.lookup("ch00", "never") is None
    assert ledger.load("ch99") == []


def test_record_replaces_same_name_and_load_all(results_dir):
    ledger.record("ch01", "speedup", 1.0, "x")
    ledger.record("ch01", "speedup", 2.0, "x")
    ledger.record("ch01", "other", 3, "x")
    ledger.record("ch02", "fps", 400.0, "images/s")
    recs = ledger.load("ch01")
    assert len(recs) == 2 and ledger.lookup("ch01", "speedup")["value"] == 2.0
    assert {r["chapter"] for r in ledger.load()} == {"ch01", "ch02"}
    assert len(ledger.load(folder=results_dir)) == 3


def test_record_accepts_numpy_scalars():
    import numpy as np

    assert ledger.record("ch00", "f32", np.float32(1.5), "ms")["value"] == 1.5
    rec = ledger.record("ch00", "i64", np.int64(3), "count")
    assert rec["value"] == 3.0 and isinstance(rec["value"], float)
    assert ledger.lookup("ch00", "f32")["value"] == 1.5


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "12", None, True, float("nan")])
def test_record_rejects_non_finite_values(value):
    with pytest.raises(ValueError, match="finite number"):
        ledger.record("ch00", "x", value, "ms")


@pytest.mark.parametrize(
    "chapter, name",
    [("ch00", "a/b"), ("ch00", "a\\b"), ("../ch", "x"), ("", "x"), ("ch00", ".hidden")],
)
def test_record_rejects_path_like_names(chapter, name, results_dir):
    with pytest.raises(ValueError, match="path separators"):
        ledger.record(chapter, name, 1.0, "ms")
    assert not any(results_dir.parent.rglob("*.json"))


def test_corrupt_ledger_file_is_a_clear_error(results_dir):
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ledger.load("bad")
    (results_dir / "dict.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="list of records"):
        ledger.load("dict")


def test_quick_and_full_mode_records_never_share_a_folder(monkeypatch, tmp_path):
    from helpers.core.environment import MODE_ENV

    monkeypatch.delenv(ledger.RESULTS_ENV, raising=False)
    monkeypatch.setattr(ledger, "repo_root", lambda: tmp_path)
    monkeypatch.setenv(MODE_ENV, "quick")
    quick = ledger.ledger_dir()
    ledger.record("ch", "x", 1.0, "s")
    monkeypatch.setenv(MODE_ENV, "full")
    full = ledger.ledger_dir()
    assert quick == tmp_path / "results" / "local" / "quick" and full.name == "full"
    assert ledger.lookup("ch", "x") is None  # the quick-mode number is not seen in full mode
    monkeypatch.setenv(MODE_ENV, "quick")
    assert ledger.lookup("ch", "x")["value"] == 1.0


def test_record_names_device_precision_and_threads(results_dir):
    rec = ledger.record("ch", "y", 2.0, "ms", device="cpu", precision="fp32")
    assert (rec["device"], rec["precision"]) == ("cpu", "fp32")
    assert "torch_threads" in rec
    bare = ledger.record("ch", "z", 2.0, "ms")
    assert bare["device"] is None and bare["precision"] is None


# ---- the machine's load on every record ---------------------------------------------------------


def _measurement(label, contended):
    from helpers.measure.machine import MachineLoad
    from helpers.measure.measurement import Measurement

    others = 0.5 if contended else 0.0
    load = MachineLoad(1.0, others, 0.0, 1.0, 1.2, resolution_s=0.04)
    return Measurement(label, [0.01] * 4, threads=2, device="cpu", cpu_s=2.0, wall_s=1.0, load=load)


def test_on_machine_passes_threads_cores_and_contention(results_dir):
    quiet, busy = _measurement("a", False), _measurement("b", True)
    fields = ledger.on_machine(quiet)
    assert fields["contended"] is False and fields["cores_used"] == [2.0]
    assert fields["threads_given"] == [2] and fields["load"]["measurements"] == 1
    both = ledger.on_machine(quiet, busy)
    assert both["contended"] is True  # mutation: any() -> all() makes this False
    rec = ledger.record("ch00", "r", 1.0, "x", **both)
    assert (
        rec["contended"] is True and ledger.lookup("ch00", "r")["load"]["others_cores_max"] == 0.5
    )
    assert ledger.on_machine(quiet.as_dict())["contended"] is False  # a subprocess's as_dict()
    with pytest.raises(ValueError, match="at least one"):
        ledger.on_machine()
    with pytest.raises(ValueError, match="not a measurement"):
        ledger.on_machine({"median_s": 1.0})


def test_record_stamps_the_process_load_by_default(results_dir, monkeypatch):
    from helpers.measure import machine

    monkeypatch.setattr(machine, "_LOADS", [])
    rec = ledger.record("ch00", "before", 1.0, "x")
    assert rec["contended"] is None and rec["load"]["scope"] == "no measurement in this process"
    machine._LOADS.append(_measurement("q", False).load)
    assert ledger.record("ch00", "quiet", 1.0, "x")["contended"] is False
    machine._LOADS.append(_measurement("c", True).load)
    rec = ledger.record("ch00", "later", 1.0, "x")
    assert rec["contended"] is True and rec["load"]["contended_measurements"] == 1


def _write(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ch08.json").write_text(json.dumps(records))


def test_check_quiet_command_fails_on_a_contended_record(tmp_path):
    """What `make bench` runs before publishing: exit 1 with the list, 0 when quiet."""
    import subprocess
    import sys

    def run(folder):
        return subprocess.run(
            [sys.executable, "-m", "helpers.record.ledger", "check-quiet", str(folder)],
            capture_output=True,
            text=True,
        )

    quiet = [
        {"chapter": "ch08", "name": "quiet", "contended": False, "load": {}},
        {"chapter": "ch08", "name": "old", "value": 1.0},  # an old record: unknown, passes
    ]
    busy = {"chapter": "ch08", "name": "int8", "contended": True, "load": {"others_cores_max": 0.9}}
    _write(tmp_path / "busy", [*quiet, busy])
    p = run(tmp_path / "busy")
    assert p.returncode == 1 and "ch08/int8" in p.stdout and "1 contended" in p.stdout
    assert "ch08/quiet" not in p.stdout and "ch08/old" not in p.stdout
    _write(tmp_path / "quiet", quiet)
    assert run(tmp_path / "quiet").returncode == 0
    (tmp_path / "empty").mkdir()
    assert run(tmp_path / "empty").returncode != 0  # an empty run publishes nothing either


def test_makefile_bench_publishes_only_after_check_quiet():
    text = (ledger.repo_root() / "Makefile").read_text()
    recipe = text.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    check = recipe.index("helpers.record.ledger check-quiet")
    assert "COURSE_RESULTS_DIR=$$stage" in recipe  # the chapters write to staging, not reference
    assert check < recipe.index("mv $$stage results/reference/")
    assert (
        "&& \\\n\t$(PY) -m helpers.record.ledger check-quiet" in recipe
    )  # chained: a failure stops


def test_a_quiet_and_an_unknown_measurement_are_unknown_not_quiet(results_dir):
    """Catches M15 (``_verdict`` calls a mix of quiet and unknown loads quiet): one figure whose
    measurements are quiet and unknown is recorded as unknown (None)."""
    from helpers.measure.measurement import Measurement

    unknown = Measurement("u", [0.01] * 4, threads=2, device="cpu")
    assert unknown.contended is None
    assert ledger.on_machine(_measurement("a", False), unknown)["contended"] is None


def test_a_ratio_is_recorded_with_one_spelling_of_its_spread(results_dir):
    from helpers.measure import Measurement, RatioSummary, paired_ratio

    base = Measurement("base", [0.02, 0.021, 0.019, 0.02], items=1)
    fast = Measurement("fast", [0.01, 0.011, 0.0095, 0.01], items=1)
    r = paired_ratio(base, fast)
    rec = ledger.record("ch00", "speedup", r, on=[base, fast], batch=1)
    assert (rec["value"], rec["unit"], rec["rounds"]) == (r.median, "x", 4)
    assert (rec["p25"], rec["p75"]) == (r.p25, r.p75) and "spread" not in rec
    assert rec["threads_given"] == [None, None] and rec["batch"] == 1
    back = RatioSummary.from_record(rec)  # the record reads back as the same ratio
    assert (back.median, back.p25, back.p75, back.rounds) == (r.median, r.p25, r.p75, 4)
    # one spelling: a spread passed any other way is refused
    for old in ({"spread": [1.5, 2.5]}, {"iqr": [1.4, 2.6]}):
        with pytest.raises(ValueError, match="RatioSummary"):
            ledger.record("ch00", "old", 2.0, "x", **old)
    with pytest.raises(ValueError, match="needs a unit"):
        ledger.record("ch00", "bare", 1.0)


def test_a_record_describes_its_machine_as_every_other_record_does(results_dir):
    """The ledger's machine is :func:`machine_facts` plus driver and CUDA, which no description
    reads: a record's machine reads as this machine, in the Time lines' and tables' words."""
    from helpers.core.hardware import describe_machine, machine_facts, same_machine

    rec = ledger.record("ch00", "ms", 1.0, "ms")
    assert rec["machine"].keys() - machine_facts().keys() == {"driver", "cuda"}
    assert describe_machine(rec["machine"], memory=True) == describe_machine(memory=True)
    assert same_machine(rec["machine"], machine_facts())
